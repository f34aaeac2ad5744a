# proxy-operator developer recipes. `just` alone lists them.
# (The README's two commands need no `just`: they are the scripts these recipes call.)

# List the recipes.
default:
    @just --list

# The demo: build the operator and show what it does.
demo:
    tests/bed/demo.sh

# Every test: provisions the test bed, then unit, property, CEL and end-to-end tests.
test *ARGS:
    tests/bed/run-tests.sh {{ARGS}}

# The fast loop: the pure core and the API types only (no control plane needed).
test-core:
    cargo test -p proxy-core -p proxy-crd

# Build (or find cached) kube-apiserver, etcd, kubectl, helm, promtool and the kvm guest image; install squid, libvirt, qemu, podman and runc when missing.
provision:
    tests/bed/provision.sh

# Format every crate.
fmt:
    cargo fmt --all

# Lint as CI does: the workspace with the kvm feature, the operator alone without it.
lint:
    cargo fmt --all -- --check
    cargo clippy --workspace --all-targets -- -D warnings
    cargo clippy --package proxy-operator --all-targets -- -D warnings

# Regenerate the CRD YAML in deploy/crds/ from the Rust types, and deploy/operator.yaml from the chart.
generate:
    cargo run -q -p proxy-operator -- crd --write deploy/crds
    deploy/render.sh

# Fail when a generated file differs from what the code (or the chart) generates.
check-generated:
    tmp=$(mktemp -d) && cargo run -q -p proxy-operator -- crd --write "$tmp" && diff -ru deploy/crds "$tmp"
    deploy/render.sh --check

# Build the container image localhost/proxy-operator:<version> with podman (deploy/Containerfile).
image:
    tests/bed/image.sh build

# Build its kvm variant localhost/proxy-operator:<version>-kvm (the kvm provider, libvirt, ssh).
image-kvm:
    tests/bed/image.sh build --kvm

# Lint the Helm chart and test the alert rules with the cached helm and promtool.
check-deploy:
    eval "$(tests/bed/provision.sh)" && "$PROXY_OPERATOR_HELM" lint --strict deploy/chart && "$PROXY_OPERATOR_PROMTOOL" check rules deploy/chart/files/alerts.yaml && "$PROXY_OPERATOR_PROMTOOL" test rules deploy/alerts/alerts.test.yaml

# Repeated code in the tree.
duplicates:
    duplicates --most 20

# What CI runs.
ci:
    .ci/run

# Benchmark: 200 Proxies applied at once vs the minimum API work (docs/benchmarks.md).
bench-reconcile:
    tests/bed/provision.sh > /dev/null
    cargo run -q -p proxy-tests --bin bench-reconcile

# Benchmark: 200 gcp Proxies to all Ready against the local Compute API: time, API calls per proxy, steady-state calls (docs/benchmarks.md).
bench-gcp:
    tests/bed/provision.sh > /dev/null
    cargo run -q -p proxy-tests --bin bench-gcp

# Benchmark: 1 000 and 10 000 External proxies over real squids: memory per proxy, time to Ready, CPU per probe, status writes/s, list latency, leadership renew age under list and lease load (docs/benchmarks.md).
bench-scale:
    tests/bed/provision.sh > /dev/null
    cargo run -q -p proxy-tests --bin bench-scale

# Benchmark: health probing with 50% of the proxies hung, probe cost, proxies per core (docs/benchmarks.md).
bench-health:
    tests/bed/provision.sh > /dev/null
    cargo run -q --release -p proxy-tests --bin bench-health

# Benchmark: the lease book under a sustained lease rate; lease acquire + release over HTTP vs a trivial warp handler; p50/p99 (docs/benchmarks.md).
bench-discovery:
    cargo run -q --release -p proxy-tests --bin bench-discovery

# Benchmark: requests/s and added p99 through the gateway vs straight through squid, and through glider (the Go peer), at 1, 64 and 512 connections (docs/benchmarks.md).
bench-gateway:
    tests/bed/provision.sh > /dev/null
    tests/bed/peer.sh > /dev/null
    cargo run -q --release -p proxy-tests --bin bench-gateway

# Benchmark: what recording costs a decide call (docs/benchmarks.md).
bench-record:
    cargo run -q --release -p proxy-tests --bin bench-record

# Benchmark: apply -> Ready of 50 new Proxies at the default 30 s health check interval (docs/benchmarks.md).
bench-ready:
    tests/bed/provision.sh > /dev/null
    cargo run -q -p proxy-tests --bin bench-ready
