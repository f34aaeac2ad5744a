#!/usr/bin/env bash
# The whole test suite, on a fresh machine or a warm one: provisions the test bed (cached
# kube-apiserver, etcd, kubectl; Debian's squid), then runs every test of the workspace —
# unit, property, CEL, and the end-to-end tests against the real control plane and squid,
# and the kvm provider's, with real VMs (libvirt, qemu and the guest image); the Helm chart
# (helm), the alert rules (promtool) and the container image (podman), built and run
# against the same control plane; and schemathesis fuzzing the discovery API of a live operator.
# Extra arguments go to `cargo test` (e.g. `-- --nocapture`).
set -euo pipefail
cd "$(dirname "$0")/../.."
eval "$(tests/bed/provision.sh)"
export PROXY_OPERATOR_KBINS PROXY_OPERATOR_GUEST PROXY_OPERATOR_HELM PROXY_OPERATOR_PROMTOOL \
  PROXY_OPERATOR_SCHEMATHESIS PROXY_OPERATOR_SCRAPY PROXY_OPERATOR_CRAWLEE
# The end-to-end tests start the real operator binary; build it first so they do not. With
# the kvm provider, as the tests build it (tests/src/operator.rs); the workspace's tests
# enable the feature through the tests crate.
cargo build --package proxy-operator --bin proxy-operator --features kvm
# The images the e2e tests of `image` run: the release binary with default features, as
# shipped, and the kvm variant (the tests rebuild them only if stale; the second build reuses
# the first's dependencies and costs one more link).
tests/bed/image.sh build >/dev/null
tests/bed/image.sh build --kvm >/dev/null
exec cargo test --workspace --no-fail-fast "$@"
