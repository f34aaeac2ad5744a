//! The API server's own count of the requests it served (`apiserver_request_total`), for
//! benchmarks that count what the operator wrote and read.

use std::collections::BTreeMap;

use crate::control_plane::ControlPlane;

/// The verbs that write.
const WRITES: [&str; 5] = ["POST", "PUT", "PATCH", "APPLY", "DELETE"];

/// The API server's write counters, by (resource, subresource, verb).
pub fn writes(plane: &ControlPlane) -> BTreeMap<(String, String, String), f64> {
    counters(plane, &WRITES)
}

/// The API server's counters of writes and of reads of one object (`GET`; lists and watches
/// are not counted), by (resource, subresource, verb).
pub fn writes_and_reads(plane: &ControlPlane) -> BTreeMap<(String, String, String), f64> {
    let mut verbs = WRITES.to_vec();
    verbs.push("GET");
    counters(plane, &verbs)
}

/// The API server's request counters of `verbs`, by (resource, subresource, verb).
fn counters(plane: &ControlPlane, verbs: &[&str]) -> BTreeMap<(String, String, String), f64> {
    let out = plane.kubectl(&["get", "--raw", "/metrics"]);
    let text = String::from_utf8_lossy(&out.stdout);
    let mut counts = BTreeMap::new();
    for line in text
        .lines()
        .filter(|l| l.starts_with("apiserver_request_total{"))
    {
        let (labels, value) = line.rsplit_once(' ').expect("a metric line");
        let label = |name: &str| {
            labels
                .split(&format!("{name}=\""))
                .nth(1)
                .and_then(|rest| rest.split('"').next())
                .unwrap_or_default()
                .to_owned()
        };
        let verb = label("verb");
        if verbs.contains(&verb.as_str()) {
            *counts
                .entry((label("resource"), label("subresource"), verb))
                .or_insert(0.0) += value.parse::<f64>().unwrap_or(0.0);
        }
    }
    counts
}

/// The status writes of Proxies between two snapshots of [`writes`].
pub fn status_writes(
    before: &BTreeMap<(String, String, String), f64>,
    after: &BTreeMap<(String, String, String), f64>,
) -> f64 {
    after
        .iter()
        .filter(|((resource, subresource, _), _)| resource == "proxies" && subresource == "status")
        .map(|(key, value)| value - before.get(key).copied().unwrap_or(0.0))
        .sum::<f64>()
        + 0.0
}
