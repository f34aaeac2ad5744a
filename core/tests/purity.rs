//! The core stays pure: no async runtime, HTTP stack or Kubernetes client may enter its
//! normal dependency tree, even through a transitive dependency.

use std::process::Command;

const FORBIDDEN: [&str; 6] = [
    "tokio",
    "hyper",
    "reqwest",
    "kube-client",
    "kube-runtime",
    "rand",
];

#[test]
fn core_dependency_tree_has_no_io_runtime() {
    // The cargo that builds this test, as cargo tells rustc (read at compile time).
    let output = Command::new(env!("CARGO"))
        .args([
            "tree",
            "--package",
            "proxy-core",
            "--edges",
            "normal",
            "--prefix",
            "none",
            "--format",
            "{p}",
        ])
        .args(["--features", "k8s-openapi/v1_36"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo tree runs");
    assert!(
        output.status.success(),
        "cargo tree failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let tree = String::from_utf8(output.stdout).unwrap();
    assert!(tree.contains("proxy-crd"), "unexpected tree:\n{tree}");
    let offenders: Vec<&str> = tree
        .lines()
        .filter(|line| {
            FORBIDDEN
                .iter()
                .any(|f| line.split_whitespace().next() == Some(f))
        })
        .collect();
    assert!(
        offenders.is_empty(),
        "proxy-core must stay pure, but depends on: {offenders:?}"
    );
}
