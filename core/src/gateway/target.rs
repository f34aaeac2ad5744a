//! The site a gateway request goes to: the CONNECT request's `host:port`, or the host of a
//! plain-HTTP request's absolute URI. Its host (lowercased, without the port) is the lease's
//! target, so cooldowns, site statistics and bans are per site, whichever port it uses,
//! exactly as the lease API's `target` is.
//!
//! A CONNECT to the gateway itself ([`OwnAddresses`]) is refused: through a proxy it comes
//! back to the gateway, a tunnel inside a tunnel with a lease per level, or opens the admin
//! port to whoever may use the proxy.

use std::collections::BTreeSet;
use std::net::IpAddr;

use crate::lease::checked_target;

/// A request's site.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    /// The host, lowercased; an IPv6 address keeps its brackets (`[2001:db8::1]`).
    pub host: String,
    /// The port.
    pub port: u16,
}

impl Target {
    /// The target of `CONNECT request_target`: `host:port`, the authority form, the port
    /// required (RFC 9110 §9.3.6). A URI (`CONNECT http://host:443`) is refused: it names a
    /// scheme the tunnel would not speak.
    pub fn connect(request_target: &str) -> Result<Self, String> {
        if request_target.contains('/') {
            return Err(format!(
                "CONNECT takes host:port (the authority form), not the URI {request_target:?}"
            ));
        }
        let authority = request_target;
        let (host, port) = split(authority)?;
        let port = port.ok_or_else(|| format!("CONNECT {authority:?} names no port"))?;
        Self::new(host, port)
    }

    /// The target of a plain-HTTP request whose absolute URI has `scheme` and `authority`
    /// (port 80 unless it says one). Only `http` is forwarded: an `https` site goes through
    /// CONNECT, which keeps the client's own TLS with the site.
    pub fn absolute(scheme: Option<&str>, authority: Option<&str>) -> Result<Self, String> {
        match scheme {
            Some(scheme) if scheme.eq_ignore_ascii_case("http") => {}
            Some(scheme) => {
                return Err(format!(
                    "the gateway forwards http:// URIs; for {scheme}:// send CONNECT (clients do so for https)"
                ));
            }
            None => {
                return Err(
                    "a proxy request needs an absolute URI (http://host/path) or CONNECT".into(),
                );
            }
        }
        let authority = authority.ok_or("the URI names no host")?;
        if authority.contains('@') {
            return Err("the URI carries credentials; send them to the site in a header".into());
        }
        let (host, port) = split(authority)?;
        Self::new(host, port.unwrap_or(80))
    }

    fn new(host: &str, port: u16) -> Result<Self, String> {
        let host = checked_target(host).map_err(|e| e.to_string())?;
        if port == 0 {
            return Err("port 0 is no port".into());
        }
        Ok(Self { host, port })
    }

    /// `host:port`, for the upstream's CONNECT request and its `Host` header.
    pub fn authority(&self) -> String {
        format!("{}:{}", self.host, self.port)
    }

    /// Whether the target is one of the gateway's own ports on one of its own hosts, on the
    /// address `local` the client reached it at, or on a loopback or unspecified address
    /// (from a proxy on the gateway's host, the gateway).
    pub fn is_gateway(&self, own: &OwnAddresses, local: IpAddr) -> bool {
        let ip = self
            .host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<IpAddr>()
            .ok();
        own.ports.contains(&self.port)
            && (own.hosts.contains(&self.host)
                || self.host == "localhost"
                || self.host.ends_with(".localhost")
                || ip.is_some_and(|ip| ip == local || ip.is_loopback() || ip.is_unspecified()))
    }
}

/// Where the gateway can be reached: its ports (the proxy's and the admin port's) and the
/// names and addresses it answers on, in the form a [`Target`]'s host has (lowercase, an
/// IPv6 address in brackets).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OwnAddresses {
    /// The proxy's port and the admin port.
    pub ports: BTreeSet<u16>,
    /// Its host names (the Pod's, the Service's) and addresses.
    pub hosts: BTreeSet<String>,
}

impl OwnAddresses {
    /// `self` and the host `host` (a name, an IPv4 address, or an IPv6 address with or
    /// without brackets), as a target names it.
    pub fn with_host(mut self, host: &str) -> Self {
        let host = host.to_ascii_lowercase();
        let host = if host.contains(':') && !host.starts_with('[') {
            format!("[{host}]")
        } else {
            host
        };
        self.hosts.insert(host);
        self
    }
}

/// `host` and the port, if `authority` names one: `[v6]:port`, `host:port`, `host`.
fn split(authority: &str) -> Result<(&str, Option<u16>), String> {
    let (host, port) = if authority.starts_with('[') {
        let end = authority
            .find(']')
            .ok_or_else(|| format!("{authority:?}: an IPv6 address without its ']'"))?;
        let (host, rest) = authority.split_at(end + 1);
        match rest {
            "" => (host, None),
            rest => (
                host,
                Some(
                    rest.strip_prefix(':')
                        .ok_or_else(|| format!("{authority:?}: what follows ']' is not :port"))?,
                ),
            ),
        }
    } else {
        match authority.rsplit_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (authority, None),
        }
    };
    let port = port
        .map(|p| {
            p.parse::<u16>()
                .ok()
                .filter(|_| p.bytes().all(|b| b.is_ascii_digit()))
                .ok_or_else(|| format!("{authority:?}: port {p:?} is not a number from 1 to 65535"))
        })
        .transpose()?;
    Ok((host, port))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(host: &str, port: u16) -> Target {
        Target {
            host: host.to_owned(),
            port,
        }
    }

    #[test]
    fn connect_takes_host_and_port_and_absolute_defaults_to_80() {
        assert_eq!(
            Target::connect("Shop.Example:443"),
            Ok(target("shop.example", 443))
        );
        assert_eq!(
            Target::connect("[2001:DB8::1]:8443"),
            Ok(target("[2001:db8::1]", 8443))
        );
        assert_eq!(
            Target::connect("10.0.0.1:443").map(|t| t.authority()),
            Ok("10.0.0.1:443".into())
        );
        assert_eq!(
            Target::absolute(Some("http"), Some("shop.example")),
            Ok(target("shop.example", 80))
        );
        assert_eq!(
            Target::absolute(Some("HTTP"), Some("shop.example:8080")),
            Ok(target("shop.example", 8080))
        );
    }

    #[test]
    fn anything_else_is_refused_with_a_reason() {
        for (refused, says) in [
            (Target::connect("shop.example"), "names no port"),
            (Target::connect("shop.example:0"), "port 0"),
            (Target::connect("http://shop.example:443"), "authority form"),
            (Target::connect("shop.example:443/"), "authority form"),
            (Target::connect("shop.example:99999"), "not a number"),
            (Target::connect("shop.example:+1"), "not a number"),
            (Target::connect("[::1"), "without its ']'"),
            (Target::connect("[::1]x"), "not :port"),
            (Target::connect("a b:443"), "not a host name"),
            (Target::connect(":443"), "not a host name"),
            (
                Target::absolute(Some("https"), Some("shop.example")),
                "send CONNECT",
            ),
            (Target::absolute(None, None), "absolute URI"),
            (Target::absolute(Some("http"), None), "no host"),
            (
                Target::absolute(Some("http"), Some("u:p@shop.example")),
                "credentials",
            ),
        ] {
            let why = refused.unwrap_err();
            assert!(why.contains(says), "{why}");
        }
    }

    #[test]
    fn a_connect_to_the_gateways_own_ports_on_its_own_hosts_is_the_gateway() {
        let own = OwnAddresses {
            ports: [8080, 9090].into(),
            ..OwnAddresses::default()
        }
        .with_host("10.0.0.5")
        .with_host("FD00::5")
        .with_host("proxy-operator-gateway.proxy-operator");
        for (authority, itself) in [
            ("10.0.0.5:8080", true),
            ("10.0.0.5:9090", true),
            ("[fd00::5]:8080", true),
            ("proxy-operator-gateway.proxy-operator:8080", true),
            ("localhost:9090", true),
            ("127.0.0.2:8080", true),
            ("[::1]:8080", true),
            ("0.0.0.0:8080", true),
            // The address the client reached it at, however the gateway listens.
            ("10.1.2.3:8080", true),
            // Another port of the same host, or the same port elsewhere: a site.
            ("10.0.0.5:443", false),
            ("10.0.0.6:8080", false),
            ("shop.example:8080", false),
            ("localhost:443", false),
        ] {
            let target = Target::connect(authority).unwrap();
            let local = IpAddr::from([10, 1, 2, 3]);
            assert_eq!(target.is_gateway(&own, local), itself, "{authority}");
        }
    }
}
