//! The committed CRD in `deploy/crds/` must be exactly what the types generate.

use crate::Proxy;

const COMMITTED: &str = include_str!("../../../deploy/crds/proxies.crawl.example.com.yaml");

#[test]
fn committed_crd_matches_the_types() {
    let fresh = Proxy::crd_yaml();
    if COMMITTED != fresh {
        let first = COMMITTED
            .lines()
            .zip(fresh.lines())
            .position(|(a, b)| a != b)
            .unwrap_or_else(|| COMMITTED.lines().count().min(fresh.lines().count()));
        panic!(
            "deploy/crds/proxies.crawl.example.com.yaml is stale or was edited by hand (first \
             difference at line {}); run `just generate` and commit the result",
            first + 1
        );
    }
}
