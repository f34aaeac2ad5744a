//! The committed CRDs in `deploy/crds/` must be exactly what the types generate.

use crate::crds;

const COMMITTED: [(&str, &str); 3] = [
    (
        "proxies.crawl.example.com.yaml",
        include_str!("../../../deploy/crds/proxies.crawl.example.com.yaml"),
    ),
    (
        "proxypools.crawl.example.com.yaml",
        include_str!("../../../deploy/crds/proxypools.crawl.example.com.yaml"),
    ),
    (
        "providerhealths.crawl.example.com.yaml",
        include_str!("../../../deploy/crds/providerhealths.crawl.example.com.yaml"),
    ),
];

#[test]
fn committed_crds_match_the_types() {
    let fresh = crds();
    assert_eq!(
        fresh.iter().map(|(file, _)| *file).collect::<Vec<_>>(),
        COMMITTED.iter().map(|(file, _)| *file).collect::<Vec<_>>(),
        "every generated CRD is committed, and only those"
    );
    for ((file, fresh), (_, committed)) in fresh.iter().zip(COMMITTED) {
        if committed != fresh {
            let first = committed
                .lines()
                .zip(fresh.lines())
                .position(|(a, b)| a != b)
                .unwrap_or_else(|| committed.lines().count().min(fresh.lines().count()));
            panic!(
                "deploy/crds/{file} is stale or was edited by hand (first difference at line \
                 {}); run `just generate` and commit the result",
                first + 1
            );
        }
    }
}
