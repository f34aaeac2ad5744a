#!/usr/bin/env bash
# The main job: a local control plane, the operator, real squid proxies, and a lease taken
# through the discovery API, each step explained; then everything is stopped.
set -euo pipefail
cd "$(dirname "$0")/../.."
say() { printf '\n\033[1m==> %s\033[0m\n' "$*"; }
say "Provisioning the local test bed (kube-apiserver, etcd, kubectl, squid; cached after the first run)"
eval "$(tests/bed/provision.sh)"
export PROXY_OPERATOR_KBINS
say "Building proxy-operator and the demo"
cargo build -q -p proxy-operator --bin proxy-operator
cargo build -q -p proxy-tests --bin demo
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
say "Nothing left running."
