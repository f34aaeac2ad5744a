use crate::*;

fn managed() -> ProxySpec {
    ProxySpec {
        mode: Mode::Managed,
        provider: Some("pods".into()),
        placement: None,
        cloud_init: None,
        endpoint: None,
        credentials_secret_ref: None,
        port: 3128,
        max_leases: None,
        health_check: None,
    }
}

fn external(host: &str, port: i32) -> ProxySpec {
    ProxySpec {
        mode: Mode::External,
        provider: None,
        endpoint: Some(Endpoint {
            host: host.into(),
            port,
        }),
        credentials_secret_ref: None,
        ..managed()
    }
}

fn status_with_ip(ip: Option<&str>) -> ProxyStatus {
    ProxyStatus {
        ip: ip.map(str::to_owned),
        ..ProxyStatus::default()
    }
}

#[test]
fn effective_port_per_mode() {
    let cases = [
        ("managed default", managed(), 3128),
        (
            "managed custom",
            ProxySpec {
                port: 8080,
                ..managed()
            },
            8080,
        ),
        (
            "external uses the endpoint port",
            external("10.1.2.3", 8888),
            8888,
        ),
        (
            "external ignores spec.port",
            ProxySpec {
                port: 9999,
                ..external("10.1.2.3", 3129)
            },
            3129,
        ),
    ];
    for (name, spec, want) in cases {
        assert_eq!(spec.effective_port(), want, "{name}");
    }
}

#[test]
fn effective_host_per_mode() {
    let with_ip = status_with_ip(Some("127.0.0.9"));
    let empty_ip = status_with_ip(Some(""));
    let no_ip = status_with_ip(None);
    let cases: [(&str, ProxySpec, Option<&ProxyStatus>, Option<&str>); 6] = [
        (
            "managed with an ip",
            managed(),
            Some(&with_ip),
            Some("127.0.0.9"),
        ),
        (
            "managed with an empty ip is not probeable",
            managed(),
            Some(&empty_ip),
            None,
        ),
        ("managed without ip", managed(), Some(&no_ip), None),
        ("managed without status", managed(), None, None),
        (
            "external uses the endpoint",
            external("proxy.example", 3128),
            None,
            Some("proxy.example"),
        ),
        (
            "external ignores status.ip",
            external("proxy.example", 3128),
            Some(&with_ip),
            Some("proxy.example"),
        ),
    ];
    for (name, spec, status, want) in cases {
        assert_eq!(spec.effective_host(status), want, "{name}");
    }
}

#[test]
fn health_check_or_default_fills_every_field() {
    let hc = managed().health_check_or_default();
    assert_eq!(hc.probe_url, "https://www.gstatic.com/generate_204");
    assert_eq!(hc.interval_seconds, 30);
    assert_eq!(hc.timeout_seconds, 5);
    assert_eq!(hc.failure_threshold, 3);
    assert_eq!(hc.success_threshold, 1);
    assert_eq!(hc.expected_status_codes, vec![200, 204]);

    let custom = HealthCheck {
        interval_seconds: 7,
        ..HealthCheck::default()
    };
    let spec = ProxySpec {
        health_check: Some(custom.clone()),
        ..managed()
    };
    assert_eq!(spec.health_check_or_default(), custom);
}

#[test]
fn partial_health_check_gets_the_other_defaults_when_parsed() {
    let spec: ProxySpec = serde_json::from_value(serde_json::json!({
        "mode": "Managed", "provider": "pods", "healthCheck": {"failureThreshold": 9}
    }))
    .unwrap();
    let hc = spec.health_check_or_default();
    assert_eq!(hc.failure_threshold, 9);
    assert_eq!(hc.interval_seconds, 30);
    assert_eq!(spec.port, 3128);
}

#[test]
fn max_leases_or_default() {
    let cases = [
        ("unset means the default", None, 5),
        ("explicit zero drains", Some(0), 0),
        ("explicit value", Some(12), 12),
        (
            "negative (rejected by the schema) is treated as zero",
            Some(-3),
            0,
        ),
    ];
    for (name, max_leases, want) in cases {
        let spec = ProxySpec {
            max_leases,
            ..managed()
        };
        assert_eq!(spec.max_leases_or_default(), want, "{name}");
    }
}

#[test]
fn explicit_zero_max_leases_survives_a_round_trip() {
    let spec = ProxySpec {
        max_leases: Some(0),
        ..managed()
    };
    let json = serde_json::to_value(&spec).unwrap();
    assert_eq!(json["maxLeases"], 0);
    let back: ProxySpec = serde_json::from_value(json).unwrap();
    assert_eq!(back.max_leases, Some(0));
}
