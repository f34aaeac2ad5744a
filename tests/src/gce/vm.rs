//! The VM runner: what the guest of a RUNNING instance would run. Like the pod runner, it
//! starts one real squid per instance on a loopback address of its own, which the API then
//! reports as the instance's natIP.
//!
//! The squid is configured the way the VM's cloud-init would configure it: when the
//! instance's `user-data` metadata is a `#cloud-config` writing `/etc/squid/squid.conf` (what
//! the gcp provider generates), squid runs that file, with only its machine-specific lines
//! replaced ([`Squid::start_with_config`]), so the ACL and port the operator generated are the
//! ones squid enforces. Other user data gets the bed's default squid on port 3128.

use std::net::Ipv4Addr;
use std::path::PathBuf;

use serde_json::Value;

use crate::squid::{Squid, next_loopback_addr};

/// Where a cloud-config's squid config goes on Debian and Ubuntu.
const SQUID_CONF: &str = "/etc/squid/squid.conf";

/// What a RUNNING instance runs.
#[derive(Debug, Clone)]
pub enum VmMode {
    /// A real squid per instance, resolving names through this hosts file.
    Squid {
        /// squid's `hosts_file` (e.g. the probe origin's).
        hosts_file: PathBuf,
    },
    /// No process, only a fresh loopback address as natIP: for benchmarks of the API work,
    /// where hundreds of squids would only measure squid's start-up.
    AddressOnly,
}

/// The guest of one RUNNING instance.
#[derive(Debug)]
pub(super) struct Vm {
    /// Its address, the natIP.
    pub addr: Ipv4Addr,
    squid: Option<Squid>,
}

impl Vm {
    /// An address for the next guest.
    pub fn address() -> Ipv4Addr {
        next_loopback_addr()
    }

    /// Boots the guest of instance `label` (unique in this process) at `addr` from its
    /// `metadata`, returning once its squid accepts connections. Blocks: run it off the
    /// runtime.
    pub fn boot(
        mode: &VmMode,
        label: &str,
        metadata: &Value,
        squid: bool,
        addr: Ipv4Addr,
    ) -> anyhow::Result<Self> {
        let squid = match mode {
            VmMode::Squid { hosts_file } if squid => {
                let squid = match squid_config(metadata)? {
                    Some((config, files)) => {
                        let port = http_port(&config)?;
                        Squid::start_with_files(label, addr, port, hosts_file, &config, &files)?
                    }
                    None => Squid::start(label, addr, 3128, hosts_file)?,
                };
                Some(squid)
            }
            _ => None,
        };
        Ok(Self { addr, squid })
    }

    /// Powers the guest off: its squid is killed, its address refuses connections. Blocks.
    pub fn power_off(self) {
        if let Some(mut squid) = self.squid {
            squid.kill();
        }
    }
}

/// The squid config a `#cloud-config` in the `user-data` metadata item writes, if any, with
/// the other files it writes (path, content: the proxy's passwd file).
type Written = (String, Vec<(String, Vec<u8>)>);

/// The squid config and the other files a `#cloud-config` in the `user-data` metadata item
/// writes, if it writes a squid config.
fn squid_config(metadata: &Value) -> anyhow::Result<Option<Written>> {
    let user_data = metadata["items"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|item| item["key"] == "user-data")
        .and_then(|item| item["value"].as_str());
    let Some(user_data) = user_data.filter(|u| u.starts_with("#cloud-config")) else {
        return Ok(None);
    };
    let doc: Value = serde_saphyr::from_str(user_data)
        .map_err(|e| anyhow::anyhow!("user-data is not valid cloud-config YAML: {e}"))?;
    let written = doc["write_files"].as_array().into_iter().flatten();
    let mut config = None;
    let mut files = Vec::new();
    for file in written {
        let (Some(path), Some(content)) = (file["path"].as_str(), file["content"].as_str()) else {
            continue;
        };
        if path == SQUID_CONF {
            config = Some(content.to_owned());
        } else {
            files.push((path.to_owned(), content.as_bytes().to_vec()));
        }
    }
    Ok(config.map(|config| (config, files)))
}

/// The port of a config's first `http_port` (`3128`, `0.0.0.0:3128`, `[::]:3128 ...`).
fn http_port(config: &str) -> anyhow::Result<u16> {
    let spec = config
        .lines()
        .find_map(|line| line.trim().strip_prefix("http_port "))
        .and_then(|rest| rest.split_whitespace().next())
        .ok_or_else(|| anyhow::anyhow!("{SQUID_CONF} has no http_port"))?;
    let port = spec.rsplit(':').next().unwrap_or(spec);
    port.parse()
        .map_err(|_| anyhow::anyhow!("{SQUID_CONF}: bad http_port '{spec}'"))
}

#[cfg(test)]
mod tests {
    use proxy_operator::providers::squid::{PASSWD_PATH, cloud_config, config};
    use serde_json::json;

    use super::*;

    fn metadata(user_data: &str) -> Value {
        json!({"items": [{"key": "ssh-keys", "value": "x"}, {"key": "user-data", "value": user_data}]})
    }

    #[test]
    fn the_operators_cloud_config_gives_its_squid_config_and_port() {
        let cidrs = ["192.0.2.0/24".to_owned()];
        let (found, files) = squid_config(&metadata(&cloud_config(3130, &cidrs, None)))
            .unwrap()
            .unwrap();
        assert_eq!(found, config(3130, &cidrs, None));
        assert_eq!(files, []);
        assert_eq!(http_port(&found).unwrap(), 3130);
        // With credentials, the passwd file comes along, at the path the config names.
        let passwd = "p1:$6$s$h\n";
        let (found, files) = squid_config(&metadata(&cloud_config(3130, &cidrs, Some(passwd))))
            .unwrap()
            .unwrap();
        assert_eq!(found, config(3130, &cidrs, Some(PASSWD_PATH)));
        assert_eq!(
            files,
            [(PASSWD_PATH.to_owned(), passwd.as_bytes().to_vec())]
        );
    }

    #[test]
    fn other_user_data_means_the_default_squid() {
        for metadata in [
            json!({}),
            metadata("#!/bin/sh\napt-get install squid\n"),
            metadata("#cloud-config\npackages: [squid]\n"),
        ] {
            assert_eq!(squid_config(&metadata).unwrap(), None, "{metadata}");
        }
        assert!(squid_config(&metadata("#cloud-config\n: [\n")).is_err());
    }

    #[test]
    fn http_port_forms() {
        for (line, port) in [
            ("http_port 3128", 3128),
            ("http_port 0.0.0.0:8080", 8080),
            ("http_port [::]:3130 name=x", 3130),
        ] {
            assert_eq!(
                http_port(&format!("acl a src all\n{line}\n")).unwrap(),
                port
            );
        }
        assert!(http_port("acl a src all\n").is_err());
        assert!(http_port("http_port x\n").is_err());
    }
}
