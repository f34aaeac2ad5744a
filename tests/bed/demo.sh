#!/usr/bin/env bash
# The main job, for a newcomer: builds the operator and shows what it does so far.
set -euo pipefail
cd "$(dirname "$0")/../.."
say() { printf '\n\033[1m==> %s\033[0m\n' "$*"; }
say "Provisioning the local test bed (cached after the first run)"
eval "$(tests/bed/provision.sh)"
say "Building proxy-operator"
cargo build -q -p proxy-operator
bin=target/debug/proxy-operator
say "What the operator can do"
"$bin" --help
say "Checking the example providers config (three providers: pods, gcp-eu, lab)"
"$bin" check-config examples/providers.yaml
say "A broken providers config is refused with the path of each problem"
"$bin" check-config examples/invalid/mismatched-block.yaml || true
say "The Proxy CRD the operator serves (first lines; full file in deploy/crds/)"
"$bin" crd | head -20
