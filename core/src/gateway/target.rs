//! The site a gateway request goes to: the CONNECT request's `host:port`, or the host of a
//! plain-HTTP request's absolute URI. Its host (lowercased, without the port) is the lease's
//! target, so cooldowns, site statistics and bans are per site, whichever port it uses,
//! exactly as the lease API's `target` is.

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
    /// The target of `CONNECT authority`: `host:port`, the port required (RFC 9110 §9.3.6).
    pub fn connect(authority: &str) -> Result<Self, String> {
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
}
