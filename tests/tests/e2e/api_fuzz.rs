//! The discovery API against its own description: schemathesis, driven by
//! `docs/openapi.yaml`, fuzzes a live operator's API on the test bed, with two Ready proxies
//! (real squid) behind it so leases are granted as well as refused.
//!
//! Every check schemathesis has runs: no 5xx; every status, header and body as documented;
//! every request the document allows accepted (2xx, or 404 and 409 where it says so) and
//! every request it forbids refused with a 4xx; 405 with an `Allow` header for a method a
//! path does not take; 401 without the token. A bound the server enforces and the document
//! does not state (or the other way round) fails it. Bounded: a fixed seed and a fixed number
//! of examples per operation, so a run is repeatable and takes well under a minute.

use std::process::Command;

use proxy_crd::Phase;
use proxy_tests::bins;
use proxy_tests::operator::DISCOVERY_TOKEN;
use proxy_tests::run_dir::subdir;
use serde_json::json;

use crate::operated::Bed;

/// Examples per operation and phase. Raise it (and drop the seed) to search harder by hand:
/// `PROXY_OPERATOR_FUZZ_EXAMPLES=1000 PROXY_OPERATOR_FUZZ_SEED=random`.
const EXAMPLES: &str = "60";
/// The seed, fixed so that a failure in CI reproduces.
const SEED: &str = "20261201";

/// What the API answers, tighter than schemathesis's defaults: a request the document allows
/// is granted or answered 404 (an unknown lease) or 409 (no proxy fits), never 401, 403 or
/// 429; one it forbids is refused with 400 (or 404 for what cannot be a lease ID, 405, 413)
/// before the lease book is asked, so never 409. The one server error allowed is the
/// documented 503 `unavailable` (with `Retry-After`), which a loaded bed can see when a save
/// of the lease book lags past its fence.
const STRICT: &str = "[checks.positive_data_acceptance]\nexpected-statuses = [\"2xx\", \"404\", \"409\", \"503\"]\n\n\
     [checks.negative_data_rejection]\nexpected-statuses = [\"400\", \"404\", \"405\", \"413\"]\n\n\
     [checks.not_a_server_error]\nexpected-statuses = [\"2xx\", \"3xx\", \"4xx\", \"503\"]\n";

#[tokio::test]
async fn schemathesis_finds_no_request_on_which_the_document_and_the_server_disagree() {
    let mut bed = Bed::new("api-fuzz").await;
    for name in ["fuzz-a", "fuzz-b"] {
        bed.create(
            name,
            json!({"mode": "Managed", "provider": "pods", "maxLeases": 100000, "healthCheck": {
                "probeURL": bed.origin.url("/generate_204"), "intervalSeconds": 2,
                "timeoutSeconds": 1}}),
        )
        .await;
    }
    for name in ["fuzz-a", "fuzz-b"] {
        bed.wait_for(name, "Ready", |p| {
            p.status.as_ref().and_then(|s| s.phase) == Some(Phase::Ready)
        })
        .await;
    }
    // Leases and sessions for the fuzzer to release and report on: a lease ID or session name
    // it draws at random was never granted, so without these the report and release routes
    // would only ever answer 404 and 204 for nothing. Its config binds the `id` and `name`
    // path parameters to them most of the time. More sessions than leases: ending a session
    // is one DELETE, and the session's report route needs some left when its turn comes.
    let mut granted = Vec::new();
    let mut sessions = Vec::new();
    for i in 0..20 {
        granted.push(lease(&bed, json!({}), &format!("lease {i}")).await);
    }
    for i in 0..60 {
        let session = format!("fuzz:s{i}");
        // The longest TTL: the fuzzer reaches the session routes minutes later on a loaded
        // machine, after the default 5 minutes had ended them.
        lease(
            &bed,
            json!({ "session": session, "ttlSeconds": 3600 }),
            &session,
        )
        .await;
        sessions.push(session);
    }
    let reports = subdir("api-fuzz-reports");
    let config = reports.join("schemathesis.toml");
    std::fs::write(
        &config,
        format!(
            "[dictionaries.leases]\nvalues = {granted:?}\n\n\
             [dictionaries.sessions]\nvalues = {sessions:?}\n\n\
             [parameters]\n\"path.id\" = {{ dictionary = \"leases\", probability = 0.8 }}\n\
             \"path.name\" = {{ dictionary = \"sessions\", probability = 0.8 }}\n\n{STRICT}"
        ),
    )
    .expect("the fuzzer's config is written");
    let document = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/openapi.yaml");
    let examples = std::env::var("PROXY_OPERATOR_FUZZ_EXAMPLES").unwrap_or(EXAMPLES.into());
    let seed = std::env::var("PROXY_OPERATOR_FUZZ_SEED").unwrap_or(SEED.into());
    let mut fuzz = Command::new(bins::schemathesis());
    fuzz.arg("--config-file")
        .arg(&config)
        .arg("run")
        .arg(document)
        .args(["--url", &bed.operator.discovery])
        .args([
            "--header",
            &format!("Authorization: Bearer {DISCOVERY_TOKEN}"),
        ])
        .args(["--checks", "all"])
        .args(["--phases", "examples,coverage,fuzzing,stateful"])
        .args(["--max-examples", &examples])
        .args(["--workers", "1", "--request-timeout", "10"])
        .args(["--generation-database", "none", "--no-color"])
        .args(["--report", "junit", "--report-dir"])
        .arg(&reports)
        .current_dir(&reports);
    if seed != "random" {
        fuzz.args(["--seed", &seed]);
    }
    let output = fuzz.output().expect("schemathesis runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    println!("{stdout}");
    assert!(
        output.status.success(),
        "schemathesis found disagreements ({}):\n{stdout}\n{stderr}\noperator log:\n{}",
        output.status,
        bed.operator.log()
    );
    // It really exercised every operation, and reached the report route's logic.
    assert!(
        stdout.contains("Tested: 10"),
        "schemathesis did not test the 10 operations:\n{stdout}"
    );
    assert!(
        !stdout.contains("Missing test data"),
        "some route only ever answered 404:\n{stdout}"
    );
}

/// Takes a lease with `body` (`what` names it in a failure) and returns its ID. The discovery
/// cache follows the controller's within a moment: polled, bounded.
async fn lease(bed: &Bed, body: serde_json::Value, what: &str) -> String {
    let http = reqwest::Client::new();
    for _ in 0..200 {
        let lease: serde_json::Value = http
            .post(format!("{}/v1/leases", bed.operator.discovery))
            .bearer_auth(DISCOVERY_TOKEN)
            .json(&body)
            .send()
            .await
            .expect("the discovery API answers")
            .json()
            .await
            .expect("a JSON answer");
        match lease["leaseID"].as_str() {
            Some(id) => return id.to_owned(),
            None => tokio::time::sleep(std::time::Duration::from_millis(100)).await,
        }
    }
    panic!("the Ready proxies could not be leased for {what}");
}
