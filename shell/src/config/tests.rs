use std::path::Path;

use super::*;
use crate::providers::settings::*;

fn examples() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../examples"))
}

/// The problems of an invalid example, as `path: message` lines.
fn problems_of(invalid: &str) -> Vec<String> {
    let error = ProvidersConfig::load(&examples().join("invalid").join(invalid)).unwrap_err();
    error
        .problems
        .iter()
        .map(|p| format!("{}: {}", p.path, p.message))
        .collect()
}

fn assert_single(invalid: &str, want_path: &str, want_message_part: &str) {
    let problems = problems_of(invalid);
    assert_eq!(problems.len(), 1, "{invalid}: {problems:?}");
    let (path, message) = problems[0].split_once(": ").unwrap();
    assert_eq!(path, want_path, "{invalid}: {problems:?}");
    assert!(
        message.contains(want_message_part),
        "{invalid}: {message:?} lacks {want_message_part:?}"
    );
}

#[test]
fn the_example_config_is_valid() {
    let config = ProvidersConfig::load(&examples().join("providers.yaml")).unwrap();
    assert_eq!(
        config.summary(),
        "ok, 3 provider(s): pods (kubernetes), gcp-eu (gcp), lab (kvm)"
    );
    let Some(Provider {
        settings: ProviderSettings::Gcp(gcp),
        ..
    }) = config.get("gcp-eu")
    else {
        panic!("gcp-eu is not a gcp provider: {config:?}")
    };
    assert_eq!(gcp.project, "my-crawl-project");
}

#[test]
fn kubernetes_defaults_are_a_pinned_image_and_private_sources() {
    let config =
        ProvidersConfig::parse("providers:\n- {name: pods, type: kubernetes, kubernetes: {}}\n")
            .unwrap();
    let ProviderSettings::Kubernetes(k) = &config.providers[0].settings else {
        panic!()
    };
    assert_eq!(k.image, DEFAULT_SQUID_IMAGE);
    assert!(!k.image.ends_with(":latest") && k.image.contains(':'));
    assert!(!k.allowed_source_cidrs.iter().any(|c| c.ends_with("/0")));
}

#[test]
fn unknown_key_is_rejected_with_its_path() {
    assert_single(
        "unknown-key.yaml",
        "providers[0].color",
        "unknown field `color`",
    );
}

#[test]
fn unknown_nested_key_is_rejected_with_its_path() {
    assert_single(
        "unknown-nested-key.yaml",
        "providers[0].gcp.projekt",
        "unknown field `projekt`",
    );
}

#[test]
fn unknown_type_is_rejected() {
    assert_single(
        "unknown-type.yaml",
        "providers[0].type",
        "unknown provider type \"aws\" (known: kubernetes, gcp, kvm)",
    );
}

#[test]
fn duplicate_name_is_rejected() {
    assert_single(
        "duplicate-name.yaml",
        "providers[1].name",
        "duplicate provider name \"pods\"",
    );
}

#[test]
fn non_dns1123_name_is_rejected() {
    assert_single(
        "bad-name.yaml",
        "providers[0].name",
        "\"GCP_EU\" is not a DNS-1123 label",
    );
}

#[test]
fn missing_type_block_is_rejected() {
    assert_single(
        "missing-block.yaml",
        "providers[0].kubernetes",
        "needs a \"kubernetes\" block",
    );
}

#[test]
fn mismatched_type_block_is_rejected() {
    let problems = problems_of("mismatched-block.yaml");
    assert_eq!(
        problems,
        [
            "providers[0].gcp: a \"gcp\" block does not belong to a provider of type \"kubernetes\"",
            "providers[0].kubernetes: a provider of type \"kubernetes\" needs a \"kubernetes\" block (it may be empty: kubernetes: {})",
        ]
    );
}

#[test]
fn gcp_without_project_is_rejected() {
    assert_single(
        "gcp-without-project.yaml",
        "providers[0].gcp.project",
        "required",
    );
}

fn gcp_problems_of(block: &str) -> Vec<String> {
    let text = format!("providers:\n- name: g\n  type: gcp\n  gcp: {block}\n");
    match ProvidersConfig::parse(&text) {
        Ok(_) => Vec::new(),
        Err(problems) => problems
            .into_iter()
            .map(|p| format!("{}: {}", p.path, p.message))
            .collect(),
    }
}

const GCP_OK: &str = "project: p, zones: [europe-west1-b], allowedSourceCIDRs: [203.0.113.0/24]";

#[test]
fn gcp_defaults_are_adc_ubuntu_lts_and_e2_small() {
    let config = ProvidersConfig::parse(&format!(
        "providers:\n- {{name: g, type: gcp, gcp: {{{GCP_OK}}}}}\n"
    ))
    .unwrap();
    let ProviderSettings::Gcp(gcp) = &config.providers[0].settings else {
        panic!("{config:?}")
    };
    assert_eq!(gcp.credentials, GcpCredentials::Adc);
    assert_eq!(gcp.endpoint, None);
    assert_eq!(gcp.machine_type, DEFAULT_GCP_MACHINE_TYPE);
    assert_eq!(gcp.image, DEFAULT_GCP_IMAGE);
    assert_eq!(gcp.network, "default");
    assert_eq!(gcp.request_timeout_seconds, 30);
}

#[test]
fn gcp_settings_are_checked_field_by_field() {
    let cases = [
        (
            "{project: p, allowedSourceCIDRs: [203.0.113.0/24]}",
            "providers[0].gcp.zones: required",
        ),
        (
            "{project: p, zones: [Europe_West1], allowedSourceCIDRs: [203.0.113.0/24]}",
            "providers[0].gcp.zones[0]: \"Europe_West1\" is not a zone name",
        ),
        (
            "{project: p, zones: [z], allowedSourceCIDRs: [0.0.0.0/0]}",
            "providers[0].gcp.allowedSourceCIDRs[0]: \"0.0.0.0/0\" would make every proxy an open relay",
        ),
        (
            "{project: p, zones: [z]}",
            "providers[0].gcp.allowedSourceCIDRs: required",
        ),
        (
            &format!("{{{GCP_OK}, networkTags: [1proxy]}}"),
            "providers[0].gcp.networkTags[0]: \"1proxy\" is not a network tag",
        ),
        (
            &format!("{{{GCP_OK}, credentials: none}}"),
            "providers[0].gcp.credentials: \"none\" sends no credentials",
        ),
        (
            &format!("{{{GCP_OK}, credentials: secret}}"),
            "providers[0].gcp.credentials: unknown variant `secret`",
        ),
        (
            &format!("{{{GCP_OK}, endpoint: \"localhost:8080\"}}"),
            "providers[0].gcp.endpoint: \"localhost:8080\" is not an http:// or https:// URL",
        ),
        (
            &format!("{{{GCP_OK}, machineType: \"\"}}"),
            "providers[0].gcp.machineType: must not be empty",
        ),
        (
            &format!("{{{GCP_OK}, requestTimeoutSeconds: 0}}"),
            "providers[0].gcp.requestTimeoutSeconds: must be at least 1",
        ),
    ];
    for (block, want) in cases {
        let problems = gcp_problems_of(block);
        assert_eq!(problems.len(), 1, "{block}: {problems:?}");
        assert!(problems[0].starts_with(want), "{block}: {problems:?}");
    }
    let local = format!("{{{GCP_OK}, credentials: none, endpoint: \"http://127.0.0.1:1\"}}");
    assert_eq!(gcp_problems_of(&local), Vec::<String>::new());
}

#[test]
fn bad_cidr_is_rejected() {
    assert_single(
        "bad-cidr.yaml",
        "providers[0].kubernetes.allowedSourceCIDRs[0]",
        "\"10.0.0.0/33\" is not",
    );
}

#[test]
fn duplicate_yaml_keys_and_empty_lists_are_rejected() {
    let dup = ProvidersConfig::parse("providers: []\nproviders: []\n").unwrap_err();
    assert!(dup[0].message.contains("not valid YAML"), "{dup:?}");
    let empty = ProvidersConfig::parse("providers: []\n").unwrap_err();
    assert_eq!(
        empty,
        [Problem {
            path: "providers".into(),
            message: "at least one provider is required".into()
        }]
    );
}

#[test]
fn every_problem_is_reported_at_once() {
    let text = "providers:\n- {name: A, type: kubernetes, kubernetes: {}}\n- {name: b, type: gcp, gcp: {}}\n";
    let paths: Vec<String> = ProvidersConfig::parse(text)
        .unwrap_err()
        .into_iter()
        .map(|p| p.path)
        .collect();
    assert_eq!(
        paths,
        [
            "providers[0].name",
            "providers[1].gcp.project",
            "providers[1].gcp.zones",
            "providers[1].gcp.allowedSourceCIDRs"
        ]
    );
}

#[test]
fn a_missing_file_names_the_file() {
    let error = ProvidersConfig::load(Path::new("/nonexistent/providers.yaml")).unwrap_err();
    assert!(
        error
            .to_string()
            .starts_with("invalid providers config /nonexistent/providers.yaml:\n  cannot read"),
        "{error}"
    );
}

#[test]
fn dns1123_labels() {
    for ok in ["a", "pods", "gcp-eu-1", "0abc", &"a".repeat(63)] {
        assert!(is_dns1123_label(ok), "{ok}");
    }
    for bad in ["", "-a", "a-", "A", "a_b", "a.b", &"a".repeat(64)] {
        assert!(!is_dns1123_label(bad), "{bad}");
    }
}

#[test]
fn the_example_kvm_hosts_have_their_address_sources() {
    let config = ProvidersConfig::load(&examples().join("providers.yaml")).unwrap();
    let Some(Provider {
        settings: ProviderSettings::Kvm(kvm),
        ..
    }) = config.get("lab")
    else {
        panic!("lab is not a kvm provider: {config:?}")
    };
    let [beelink, nas1] = &kvm.hosts[..] else {
        panic!("{kvm:?}")
    };
    assert_eq!(beelink.address, AddressSource::Dhcp {});
    assert_eq!(beelink.network(), Some("default"));
    assert_eq!(beelink.accelerator, Accelerator::Kvm);
    assert_eq!(nas1.network(), None);
    assert_eq!(
        nas1.address.pool(),
        Some(&["192.168.1.60".to_owned(), "192.168.1.61".to_owned()][..])
    );
}

/// The problems of a providers config with one kvm provider whose `kvm` block is `block`.
fn kvm_problems(block: &str) -> Vec<String> {
    let text = format!("providers:\n- name: lab\n  type: kvm\n  kvm:\n{block}");
    match ProvidersConfig::parse(&text) {
        Ok(config) => panic!("accepted: {config:?}"),
        Err(problems) => problems
            .into_iter()
            .map(|p| format!("{}: {}", p.path, p.message))
            .collect(),
    }
}

#[test]
fn kvm_settings_are_validated_with_their_paths() {
    let host = "    hosts:\n    - {name: a, uri: 'qemu:///system', baseImage: base.qcow2";
    let cases: [(String, &[&str]); 10] = [
        (
            "    hosts: []\n".into(),
            &["providers[0].kvm.hosts: required: at least one libvirt host"],
        ),
        (
            "    hosts:\n    - {name: a}\n".into(),
            &[
                "providers[0].kvm.hosts[0].uri: required",
                "providers[0].kvm.hosts[0].baseImage: required",
            ],
        ),
        (
            format!("{host}}}\n    - {{name: a, uri: 'x', baseImage: b}}\n"),
            &[
                "providers[0].kvm.hosts[1].name: duplicate host name \"a\"",
                "providers[0].kvm.hosts[1].uri: \"x\" is not a libvirt URI",
            ],
        ),
        (
            format!(
                "{host}, address: {{static: {{addresses: [10.0.0.5, nope, 10.0.0.5], gateway: g}}}}}}\n"
            ),
            &[
                "providers[0].kvm.hosts[0].address.static.gateway: \"g\" is not an IP address",
                "providers[0].kvm.hosts[0].address.static.addresses[1]: \"nope\" is not an IPv4 address",
                "providers[0].kvm.hosts[0].address.static.addresses[2]: duplicate address \"10.0.0.5\"",
            ],
        ),
        (
            format!("{host}, network: default, address: {{hostPort: {{addresses: []}}}}}}\n"),
            &[
                "providers[0].kvm.hosts[0].network: a hostPort host's VMs use qemu's user-mode networking",
                "providers[0].kvm.hosts[0].address.hostPort.addresses: required",
            ],
        ),
        (
            format!("{host}, address: {{dhcp: {{}}, hostPort: {{addresses: []}}}}}}\n"),
            &["providers[0].kvm.hosts[0].address: "],
        ),
        (
            format!("{host}, accelerator: hvf}}\n"),
            &["providers[0].kvm.hosts[0].accelerator: unknown variant `hvf`"],
        ),
        (
            format!("{host}}}\n    allowedSourceCIDRs: [10.0.0.0/40]\n"),
            &["providers[0].kvm.allowedSourceCIDRs[0]: \"10.0.0.0/40\" is not"],
        ),
        (
            format!("{host}}}\n    allowedSourceCIDRs: [0.0.0.0/0]\n"),
            &[
                "providers[0].kvm.allowedSourceCIDRs[0]: \"0.0.0.0/0\" would make every proxy an open relay",
            ],
        ),
        (
            format!("{host}, network: ''}}\n"),
            &["providers[0].kvm.hosts[0].network: must not be empty"],
        ),
    ];
    for (block, wanted) in cases {
        let problems = kvm_problems(&block);
        assert_eq!(problems.len(), wanted.len(), "{block}: {problems:?}");
        for (problem, wanted) in problems.iter().zip(wanted) {
            assert!(
                problem.starts_with(wanted),
                "{block}: {problem:?} is not {wanted:?}"
            );
        }
    }
}

#[test]
fn kvm_defaults_are_dhcp_on_the_default_network_and_pool() {
    let config = ProvidersConfig::parse(
        "providers:\n- {name: lab, type: kvm, kvm: {hosts: [{name: a, uri: 'qemu:///system', baseImage: b}]}}\n",
    )
    .unwrap();
    let ProviderSettings::Kvm(kvm) = &config.providers[0].settings else {
        panic!()
    };
    let host = &kvm.hosts[0];
    assert_eq!(
        (host.storage_pool.as_str(), host.network(), &host.address),
        ("default", Some("default"), &AddressSource::Dhcp {})
    );
    assert_eq!(kvm.allowed_source_cidrs, default_allowed_source_cidrs());
}

#[test]
fn every_sample_managed_proxy_names_a_provider_and_placement_of_the_example_config() {
    let config = ProvidersConfig::load(&examples().join("providers.yaml")).unwrap();
    let check = |name: &str, spec: &proxy_crd::ProxySpec| {
        let Some(provider) = spec.provider.as_deref() else {
            return false;
        };
        let placement = spec.placement.clone().unwrap_or_default();
        let entry = config
            .get(provider)
            .unwrap_or_else(|| panic!("{name}: provider {provider} is not in providers.yaml"));
        match &entry.settings {
            ProviderSettings::Gcp(gcp) => {
                if let Some(zone) = &placement.zone {
                    assert!(gcp.zones.contains(zone), "{name}: zone {zone}");
                }
            }
            ProviderSettings::Kvm(kvm) => {
                if let Some(host) = &placement.host {
                    assert!(
                        kvm.hosts.iter().any(|h| &h.name == host),
                        "{name}: host {host}"
                    );
                }
            }
            ProviderSettings::Kubernetes(_) => {}
        }
        true
    };
    let (mut proxies, mut pool_specs) = (0, 0);
    for entry in std::fs::read_dir(examples()).unwrap() {
        let path = entry.unwrap().path();
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        if !(name.starts_with("proxy-") && name.ends_with(".yaml")) {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        if text.contains("\nkind: ProxyPool\n") {
            // Every spread entry's Proxy spec, as the pool makes them.
            let pool: proxy_crd::ProxyPool = serde_saphyr::from_str(&text).unwrap();
            for slot in proxy_core::pool::spread::slots(&pool.spec, 100) {
                pool_specs += usize::from(check(name, &slot.spec));
            }
        } else {
            let proxy: proxy_crd::Proxy = serde_saphyr::from_str(&text).unwrap();
            proxies += usize::from(check(name, &proxy.spec));
        }
    }
    assert_eq!(proxies, 3, "the kubernetes, gcp and kvm samples");
    assert_eq!(pool_specs, 2, "the pool sample's two spread entries");
}

#[test]
fn gcp_request_timeout_takes_seconds_or_a_duration() {
    let timeout = |value: &str| {
        let text = format!(
            "providers:\n- {{name: g, type: gcp, gcp: {{{GCP_OK}, requestTimeoutSeconds: {value}}}}}\n"
        );
        ProvidersConfig::parse(&text)
            .map(|config| match &config.providers[0].settings {
                ProviderSettings::Gcp(gcp) => gcp.request_timeout_seconds,
                other => panic!("{other:?}"),
            })
            .map_err(|problems| format!("{problems:?}"))
    };
    assert_eq!(timeout("45"), Ok(45));
    assert_eq!(timeout("2m"), Ok(120));
    assert_eq!(timeout("\"30s\""), Ok(30));
    let refused = timeout("ten").unwrap_err();
    assert!(refused.contains("requestTimeoutSeconds"), "{refused}");
    assert!(refused.contains("10m"), "{refused}");
}
