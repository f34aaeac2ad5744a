#!/usr/bin/env bash
# Renders deploy/operator.yaml, the plain manifests, from the Helm chart in deploy/chart with
# deploy/operator-values.yaml, so the two never disagree. `--check` renders to a temporary
# file and fails (printing the diff) when deploy/operator.yaml differs: CI's "generated files
# are current" step runs it.
# helm is the cached one tests/bed/provision.sh builds (or $PROXY_OPERATOR_HELM).
set -euo pipefail
cd "$(dirname "$0")/.."
helm=${PROXY_OPERATOR_HELM:-}
if [ -z "$helm" ]; then
  helm=$(tests/bed/provision.sh | sed -n 's/^export PROXY_OPERATOR_HELM=//p')
fi
render() {
  cat <<'HEADER'
# proxy-operator: namespace, RBAC, providers config, the operator's and the gateway's
# Deployments, PodDisruptionBudgets, Services, and the FlowSchema that gives the leadership
# Lease requests the leader-election priority.
# GENERATED from the Helm chart deploy/chart by deploy/render.sh (values:
# deploy/operator-values.yaml); edit the chart, then run deploy/render.sh.
# Apply after the CRDs:
#   kubectl apply -f deploy/crds/ && kubectl apply -f deploy/operator.yaml
# This file ships no discovery token: create the Secret yourself, with a token of your own
# (the operator's Pods do not start until it exists):
#   kubectl -n proxy-operator create secret generic discovery-token \
#     --from-literal=token="$(openssl rand -hex 32)"
# Crawlers send it as `Authorization: Bearer <token>`; `GET /debug/recording` on the metrics
# port takes it too (metrics stay open to scrapers).
# The gateway (docs/gateway.md) reads its tenants from the Secret gateway-tenants, one key
# per tenant and its token the value (until it exists, every client gets 407):
#   kubectl -n proxy-operator create secret generic gateway-tenants \
#     --from-literal=default="$(openssl rand -hex 32)"
# The image localhost/proxy-operator:<version> is built by tests/bed/image.sh; push it to
# your registry and change `image:` below (or install the chart with image.repository).
HEADER
  "$helm" template proxy-operator deploy/chart --namespace proxy-operator \
    --values deploy/operator-values.yaml 2>/dev/null
}
if [ "${1:-}" = --check ]; then
  rendered=$(mktemp)
  trap 'rm -f "$rendered"' EXIT
  render > "$rendered"
  diff -u deploy/operator.yaml "$rendered" || {
    echo "deploy/operator.yaml is not what deploy/chart renders: run deploy/render.sh" >&2
    exit 1
  }
else
  render > deploy/operator.yaml
fi
