//! The alert rules and the dashboard of deploy/: promtool (built from the Go module proxy by
//! tests/bed/provision.sh) checks the rules and runs their unit tests
//! (deploy/alerts/alerts.test.yaml); the dashboard is Grafana JSON whose every panel queries.
//! Whether the operator exports the metrics they read is checked against a real scrape in
//! the e2e test of the chart.

use std::process::Command;

use proxy_tests::bins::{promtool, repo_root};

fn promtool_ok(args: &[&str]) -> String {
    let out = Command::new(promtool())
        .args(args)
        .current_dir(repo_root())
        .output()
        .expect("run promtool");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "promtool {}:\n{text}", args.join(" "));
    text
}

#[test]
fn promtool_accepts_the_alert_rules() {
    let text = promtool_ok(&["check", "rules", "deploy/chart/files/alerts.yaml"]);
    assert!(text.contains("SUCCESS: 8 rules found"), "{text}");
}

#[test]
fn the_alert_rules_pass_their_promtool_unit_tests() {
    let text = promtool_ok(&["test", "rules", "deploy/alerts/alerts.test.yaml"]);
    assert!(text.contains("SUCCESS"), "{text}");
}

#[test]
fn every_dashboard_panel_queries_prometheus() {
    let text = std::fs::read_to_string(repo_root().join("deploy/chart/files/dashboard.json"))
        .expect("read the dashboard");
    let dashboard: serde_json::Value = serde_json::from_str(&text).expect("dashboard JSON");
    let panels = dashboard["panels"].as_array().expect("panels");
    let graphs: Vec<_> = panels.iter().filter(|p| p["type"] != "row").collect();
    assert!(graphs.len() >= 12, "{} panels", graphs.len());
    for panel in graphs {
        let targets = panel["targets"].as_array().cloned().unwrap_or_default();
        assert!(!targets.is_empty(), "{} has no query", panel["title"]);
        for target in targets {
            let expr = target["expr"].as_str().unwrap_or_default();
            assert!(
                expr.contains("proxy_operator_"),
                "{}: {expr}",
                panel["title"]
            );
        }
    }
    for title in [
        "Proxies by phase",
        "Probe latency",
        "Lease utilisation",
        "Provider errors",
        "Reconcile duration",
    ] {
        assert!(
            panels.iter().any(|p| p["title"] == title),
            "no panel {title:?}"
        );
    }
}
