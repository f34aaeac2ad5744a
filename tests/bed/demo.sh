#!/usr/bin/env bash
# The main job: a local control plane, the operator, real squid proxies, and a lease taken
# through the discovery API, each step explained; then everything is stopped.
set -euo pipefail
cd "$(dirname "$0")/../.."
say() { printf '\n\033[1m==> %s\033[0m\n' "$*"; }
# Each phase says how long it took, so a slow first run shows where its time went.
started=$SECONDS
phase_started=$SECONDS
took() { printf '    (%s: %ds)\n' "$1" $((SECONDS - phase_started)); phase_started=$SECONDS; }
say "Provisioning what the demo needs (kube-apiserver, etcd, kubectl, squid; cached after the first run)"
eval "$(tests/bed/provision.sh --demo)"
export PROXY_OPERATOR_KBINS
took provisioning
say "Building proxy-operator and the demo (no kvm provider: the demo needs no libvirt)"
cargo build -q -p proxy-operator --bin proxy-operator -p proxy-tests --bin demo --no-default-features
took building
target/debug/demo &
demo=$!
wait "$demo"
# The demo's processes (they all run from /tmp/proxy-operator-bed.<demo pid>) are stopped by
# tests/bed/reap.sh once it has exited.
sleep 1
if pgrep -f "proxy-operator-bed\.$demo/" >/dev/null; then
  echo "demo: processes were left running:" >&2
  pgrep -af "proxy-operator-bed\.$demo/" >&2
  exit 1
fi
took "the demo"
say "Nothing left running. The whole demo took $((SECONDS - started))s."
