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
    /// Besides these, a username may always name `provider`, `region`, `zone` and `network`:
    /// the labels the operator writes on every Proxy (`crawl.example.com/zone`...), unless
    /// this flag maps the same key to another label.
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
    /// The holder the gateway's leases name (sessions' excepted), unique to this gateway
    /// and the same after a restart: at start it releases every lease of its holder, those
    /// a predecessor that died left (default: `gateway:<host name>`, in a Pod its name).
    #[arg(long, env = "GATEWAY_HOLDER")]
    pub holder: Option<String>,
    /// A name the gateway is reached by (its Service's DNS names): a CONNECT to it on the
    /// proxy's or the admin port is refused, as one to its own addresses is. Repeat, or
    /// separate by commas.
    #[arg(long = "own-host", value_delimiter = ',')]
    pub own_hosts: Vec<String>,
    /// Log line format (default: json, or text when standard output is a terminal).
    #[arg(long, env = "LOG_FORMAT", value_enum)]
    pub log_format: Option<LogFormat>,
}

impl Args {
    /// `--holder`, checked, or `gateway:<host name>`.
    pub fn holder(&self) -> anyhow::Result<String> {
        let holder = match &self.holder {
            Some(holder) => holder.clone(),
            None => format!("gateway:{}", host_name()),
        };
        proxy_core::lease::checked_holder(&holder)
            .map(str::to_owned)
            .map_err(|e| anyhow!("--holder: {e}"))
    }

    /// Where the gateway can be reached: its two ports, their addresses when they are
    /// specific, its host name and `--own-host`.
    pub fn own_addresses(&self) -> proxy_core::gateway::target::OwnAddresses {
        let mut own = proxy_core::gateway::target::OwnAddresses {
            ports: [self.listen.port(), self.metrics_addr.port()].into(),
            ..Default::default()
        }
        .with_host(&host_name());
        for addr in [self.listen, self.metrics_addr] {
            if !addr.ip().is_unspecified() {
                own = own.with_host(&addr.ip().to_string());
            }
        }
        for host in self.own_hosts.iter().filter(|h| !h.trim().is_empty()) {
            own = own.with_host(host.trim());
        }
        own
    }

    /// The username grammar: the topology keys, `--username-label` (which wins for a key
    /// both name) and `--max-lease-ttl-seconds`.
    pub fn grammar(&self) -> anyhow::Result<proxy_core::gateway::Grammar> {
        let topology = proxy_core::topology::USERNAME_KEYS
            .iter()
            .map(|(key, label)| ((*key).to_owned(), (*label).to_owned()));
        let flagged = self
            .username_labels
            .iter()
            .filter(|entry| !entry.trim().is_empty())
            .map(|entry| match entry.split_once('=') {
                Some((key, label)) => (key.trim().to_owned(), label.trim().to_owned()),
                None => (entry.trim().to_owned(), entry.trim().to_owned()),
            });
        let labels = topology.chain(flagged).collect();
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
            ..Settings::default()
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

/// The host's name (a Pod's is its name): `HOSTNAME`, else the kernel's, else `gateway`.
fn host_name() -> String {
    std::env::var("HOSTNAME")
        .ok()
        .or_else(|| std::fs::read_to_string("/proc/sys/kernel/hostname").ok())
        .map(|name| name.trim().to_ascii_lowercase())
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| "gateway".into())
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
        assert_eq!(
            grammar.labels,
            [
                ("geo".into(), "geo".into()),
                ("network".into(), "crawl.example.com/network".into()),
                ("provider".into(), "crawl.example.com/provider".into()),
                ("region".into(), "crawl.example.com/region".into()),
                ("zone".into(), "crawl.example.com/zone".into()),
            ]
            .into()
        );
        let grammar = gateway_args(&[
            "--username-label",
            "geo,region=topology.kubernetes.io/region",
            "--username-label",
            "tier",
        ])
        .grammar()
        .unwrap();
        assert_eq!(grammar.labels.len(), 6, "{:?}", grammar.labels);
        assert_eq!(grammar.labels["region"], "topology.kubernetes.io/region");
        assert_eq!(grammar.labels["zone"], "crawl.example.com/zone");
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

    #[test]
    fn the_holder_is_checked_and_the_own_hosts_are_the_gateways() {
        let args = gateway_args(&["--holder", "gateway:gw-0"]);
        assert_eq!(args.holder().unwrap(), "gateway:gw-0");
        assert!(gateway_args(&[]).holder().unwrap().starts_with("gateway:"));
        let refused = gateway_args(&["--holder", "a b"]).holder();
        assert!(refused.unwrap_err().to_string().starts_with("--holder: "));
        let own = gateway_args(&[
            "--listen",
            "10.0.0.5:8080",
            "--own-host",
            "gw.proxy-operator,gw.proxy-operator.svc",
        ])
        .own_addresses();
        assert_eq!(own.ports, [8080, 9090].into());
        for host in ["10.0.0.5", "gw.proxy-operator", "gw.proxy-operator.svc"] {
            assert!(own.hosts.contains(host), "{host}: {own:?}");
        }
    }
}
