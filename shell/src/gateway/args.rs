//! The flags of `proxy-operator gateway` (docs/gateway.md): the gateway's own, beside the
//! operator's (`crate::operator::Args`), with the settings derived from them.

use std::time::Duration;

use anyhow::anyhow;

use super::Settings;
use crate::duration::{self, at_least_10ms};
use crate::runtime::telemetry::LogFormat;

/// The flags of `proxy-operator gateway` (docs/gateway.md).
#[derive(Debug, clap::Args)]
pub struct Args {
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
    pub log_format: Option<LogFormat>,
}

impl Args {
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
    pub fn settings(&self) -> Settings {
        Settings {
            header_read_timeout: at_least_10ms(self.http_header_timeout_seconds),
            request_timeout: at_least_10ms(self.http_request_timeout_seconds),
            connect_timeout: at_least_10ms(self.connect_timeout_seconds),
            idle_timeout: at_least_10ms(self.idle_timeout_seconds),
            shutdown_grace: at_least_10ms(self.shutdown_grace_seconds),
        }
    }

    /// The admin port's server limits (the same flags).
    pub fn http(&self) -> crate::runtime::server::Settings {
        let settings = self.settings();
        crate::runtime::server::Settings {
            header_read_timeout: settings.header_read_timeout,
            request_timeout: settings.request_timeout,
            shutdown_grace: settings.shutdown_grace,
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::cli::{Cli, Command};

    fn gateway_args(flags: &[&str]) -> Args {
        let argv = ["proxy-operator", "gateway", "--tenants-dir", "/t"]
            .into_iter()
            .chain(flags.iter().copied());
        match Cli::try_parse_from(argv) {
            Ok(Cli {
                command: Command::Gateway(args),
            }) => *args,
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
