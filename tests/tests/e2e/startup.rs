//! What `proxy-operator run` refuses, and warns about, at start: the real binary.

use std::path::Path;
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use proxy_tests::bins::repo_root;
use proxy_tests::control_plane::ControlPlane;
use proxy_tests::operator::{DISCOVERY_TOKEN, binary};
use proxy_tests::run_dir::subdir;

const PODS_CONFIG: &str = "providers:\n  - name: pods\n    type: kubernetes\n    kubernetes: {}\n";

/// `proxy-operator run` with `args` against the shared control plane, with the discovery
/// token `token` (`None`: none in the environment), its output in `dir`/`output.log`.
fn run(dir: &Path, args: &[&str], token: Option<&str>) -> std::process::Child {
    let log = std::fs::File::create(dir.join("output.log")).expect("create the output log");
    let mut command = Command::new(binary());
    command
        .arg("run")
        .args([
            "--discovery-addr",
            "127.0.0.1:0",
            "--metrics-addr",
            "127.0.0.1:0",
        ])
        .args(args)
        .env("KUBECONFIG", &ControlPlane::shared().kubeconfig)
        .env("RUST_LOG", "info")
        .env_remove("DISCOVERY_TOKEN")
        .stdin(Stdio::null())
        .stdout(log.try_clone().expect("the output log"))
        .stderr(log);
    if let Some(token) = token {
        command.env("DISCOVERY_TOKEN", token);
    }
    command.spawn().expect("start proxy-operator")
}

/// Runs `args` to the end (at most 60 s): the exit status and the output.
fn run_to_exit(name: &str, args: &[&str]) -> (ExitStatus, String) {
    let dir = subdir(name);
    let mut child = run(&dir, args, Some(DISCOVERY_TOKEN));
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for proxy-operator") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!(
                "`proxy-operator run {}` still runs after 60 s:\n{}",
                args.join(" "),
                std::fs::read_to_string(dir.join("output.log")).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let output = std::fs::read_to_string(dir.join("output.log")).unwrap_or_default();
    (status, output)
}

fn example(path: &str) -> String {
    repo_root()
        .join("examples")
        .join(path)
        .display()
        .to_string()
}

#[test]
fn run_refuses_an_invalid_providers_config_naming_the_file_and_the_path() {
    let file = example("invalid/unknown-key.yaml");
    let (status, output) = run_to_exit("start-invalid", &["--providers-config", &file]);
    assert_eq!(status.code(), Some(1), "{output}");
    assert!(
        output.contains(&format!("invalid providers config {file}:"))
            && output.contains("providers[0].color: unknown field `color`"),
        "{output}"
    );
}

#[test]
fn run_refuses_a_provider_that_cannot_start_naming_the_file_and_the_path() {
    // examples/providers.yaml is valid, but GCE label values are lowercase: the gcp provider
    // could not label its VMs with this installation identity, so GC could not find them.
    let file = example("providers.yaml");
    let (status, output) = run_to_exit(
        "start-unsupported",
        &[
            "--providers-config",
            &file,
            "--installation-id",
            "Startup.Test",
            "--no-gc",
        ],
    );
    assert_eq!(status.code(), Some(1), "{output}");
    assert!(
        output.contains(&format!(
            "{file}: providers[1] (\"gcp-eu\"): installation identity \"Startup.Test\" is not a legal GCE label value"
        )),
        "{output}"
    );
}

#[test]
fn run_refuses_namespace_with_gc_unless_told_how() {
    let dir = subdir("start-namespaced");
    let config = dir.join("providers.yaml");
    std::fs::write(&config, PODS_CONFIG).expect("write the providers config");
    let config = config.display().to_string();
    let (status, output) = run_to_exit(
        "start-namespaced-run",
        &["--providers-config", &config, "--namespace", "crawl"],
    );
    assert_eq!(status.code(), Some(1), "{output}");
    assert!(
        output.contains("--namespace restricts the cache, so GC would take the instances")
            && output.contains("--gc-allow-namespaced")
            && output.contains("--no-gc"),
        "{output}"
    );
}

/// Starts the operator with `token` and returns its output once its discovery API listens.
async fn output_once_listening(name: &str, token: Option<&str>) -> String {
    let plane = ControlPlane::shared();
    let ns = plane.namespace(&plane.client().await, name).await;
    let dir = subdir(name);
    let config = dir.join("providers.yaml");
    std::fs::write(&config, PODS_CONFIG).expect("write the providers config");
    let config = config.display().to_string();
    let args = [
        "--providers-config",
        &config,
        "--namespace",
        &ns,
        "--no-gc",
        "--installation-id",
        &ns,
        "--leadership-namespace",
        &ns,
    ];
    let mut child = run(&dir, &args, token);
    let mut output = String::new();
    for _ in 0..300 {
        output = std::fs::read_to_string(dir.join("output.log")).unwrap_or_default();
        if output.contains("discovery API listening") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let _ = child.kill();
    let _ = child.wait();
    assert!(
        output.contains("discovery API listening"),
        "the discovery API never listened:\n{output}"
    );
    output
}

#[tokio::test]
async fn without_a_token_the_operator_warns_that_the_api_is_open() {
    let output = output_once_listening("start-no-token", None).await;
    assert!(
        output.contains(
            "DISCOVERY API WITHOUT AUTHENTICATION: no --discovery-token (DISCOVERY_TOKEN) is set"
        ),
        "{output}"
    );
    let with_token = output_once_listening("start-token", Some(DISCOVERY_TOKEN)).await;
    assert!(
        !with_token.contains("WITHOUT AUTHENTICATION"),
        "warned although a token is set:\n{with_token}"
    );
}
