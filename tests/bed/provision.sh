#!/usr/bin/env bash
# Provisions what the test bed needs, idempotently:
#   - kube-apiserver, etcd and kubectl, built from the Go module proxy into a cache keyed by
#     version (no registry we can reach ships these binaries, and there is no Docker engine);
#   - squid from Debian's packages, when it is missing;
#   - for the kvm provider: libvirt (daemon, qemu driver, client, headers) and qemu from
#     Debian's packages, debootstrap, and the guest image tests/bed/guest-image.sh builds
#     into the same cache;
#   - for the API fuzz test: schemathesis from PyPI, in a virtualenv in the same cache keyed
#     by version;
#   - for shipping (issue 19): helm and promtool, built from the Go module proxy into the same
#     cache keyed by version, and podman (it builds with buildah's library) with runc from Debian's packages
#     (the image is built and run without a Docker engine or an image registry);
#   - for the client shims (issues 17, 39): Scrapy 2.19.0 and Playwright 1.65.2 (a venv), and
#     Crawlee 3.18.1 with Playwright 1.65.2 (node modules from clients/js/package-lock.json),
#     installed by tests/bed/clients.sh into the same cache; Debian's chromium for Playwright.
# A warm run only checks that the cached binaries answer `--version` and the guest image is
# complete, and returns in seconds.
# Prints `export` lines for the binaries' and the guest image's directories, so callers can
# `eval` it.
#
# `provision.sh --check-only` only runs those checks: exits 0 when the cache is good, 1 when a
# run would rebuild (nothing is installed or built). CI runs it 50 times in a row (.ci/run).
#
# `provision.sh --demo` provisions only what the demo (tests/bed/demo.sh) uses: squid and the
# control plane's binaries. The rest is the test suite's, and a newcomer's first run should
# not wait for it (issue 40: the demo took 40 minutes cold when it provisioned everything).
#
# Environment:
#   K8S_VERSION       kube-apiserver version to build (default 1.36.3)
#   HELM_VERSION      helm to build (default 4.3.2; module helm.sh/helm/v4)
#   PROMETHEUS_VERSION  promtool's Prometheus release (default 3.16.0; its Go module is
#                     github.com/prometheus/prometheus v0.316.0)
#   SCHEMATHESIS_VERSION  schemathesis to install from PyPI (default 4.32.5)
#   PROXY_OPERATOR_CACHE  cache root (default ${XDG_CACHE_HOME:-$HOME/.cache}/proxy-operator)
#   SKIP_APT=1        do not install Debian packages (for machines without root)
set -euo pipefail

K8S=${K8S_VERSION:-1.36.3}
STG=0.${K8S#1.}                     # k8s 1.36.3 -> staging modules v0.36.3
CACHE=${PROXY_OPERATOR_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/proxy-operator}
OUT=$CACHE/kbins/v$K8S
HELM=${HELM_VERSION:-4.3.2}
HELM_OUT=$CACHE/helm/v$HELM
PROMTOOL=${PROMETHEUS_VERSION:-3.16.0}
PROMTOOL_OUT=$CACHE/promtool/v$PROMTOOL
IFS=. read -r pmajor pminor ppatch <<<"$PROMTOOL"
PROMTOOL_MODULE=v0.$((pmajor * 100 + pminor)).$ppatch   # 3.16.0 -> v0.316.0
SCHEMATHESIS=${SCHEMATHESIS_VERSION:-4.32.5}
SCHEMATHESIS_OUT=$CACHE/schemathesis/v$SCHEMATHESIS
log() { printf 'provision: %s\n' "$*" >&2; }

# install_debian_packages [--demo]: what is missing of the test bed's Debian packages, or with
# --demo of the demo's only (squid, and procps for the demo's check that nothing is left).
install_debian_packages() {
  local missing=()
  command -v squid >/dev/null 2>&1 || [ -x /usr/sbin/squid ] || missing+=(squid)
  command -v pkill >/dev/null 2>&1 || missing+=(procps)
  if [ "${1:-}" != --demo ]; then
    # schemathesis goes into a virtualenv: Debian's python3 needs python3-venv for that (a
    # python3 of its own, such as pyenv's, carries ensurepip already).
    python3 -c 'import ensurepip, venv' >/dev/null 2>&1 || missing+=(python3-venv)
    # The kvm provider: libvirt-dev to build it, the daemon and qemu for its real-VM e2e,
    # debootstrap for the guest image. Shipping: podman and runc for tests/bed/image.sh (crun
    # refuses this machine's hybrid cgroup hierarchy; runc runs on it), and openssh-client,
    # whose ssh the kvm image carries (`image.sh build --kvm`).
    local pkg
    # chromium: the browser the client shims' Playwright tests drive (Playwright's own
    # browser download does not work here).
    for pkg in libvirt-dev libvirt-clients libvirt-daemon libvirt-daemon-driver-qemu \
        qemu-system-x86 qemu-utils debootstrap podman runc conmon chromium openssh-client; do
      [[ $(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null) == *"ok installed"* ]] || missing+=("$pkg")
    done
  fi
  [ ${#missing[@]} -eq 0 ] && return 0
  if [ "${SKIP_APT:-}" = 1 ]; then log "missing ${missing[*]} and SKIP_APT=1"; exit 1; fi
  log "installing ${missing[*]} from Debian's packages"
  # The squid package's postinst would start the system service; we start our own instances.
  printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d
  DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
  rm -f /usr/sbin/policy-rc.d
}

# Whether the command succeeds and its output names v$K8S. The output is read whole before it
# is matched: `cmd | grep -q` under pipefail fails whenever grep exits at the first match
# while cmd still writes (SIGPIPE), which made warm runs rebuild the control plane.
says_version() {
  local out
  out=$("$@" 2>/dev/null) || return 1
  [[ $out == *"v$K8S"* ]]
}

binaries_ok() {
  [ -x "$OUT/kube-apiserver" ] && [ -x "$OUT/etcd" ] && [ -x "$OUT/kubectl" ] \
    && says_version "$OUT/kube-apiserver" --version \
    && says_version "$OUT/kubectl" version --client \
    && "$OUT/etcd" --version >/dev/null 2>&1
}

build_control_plane() {
  local w; w=$(mktemp -d)
  trap 'rm -rf "$w"' RETURN
  export CGO_ENABLED=0 GOFLAGS=-mod=mod GOTOOLCHAIN=local
  log "building kube-apiserver, kubectl v$K8S and etcd from the Go module proxy (cold: about 8 min on 2 cores)"
  # 1) The staging list comes from the kubernetes module's own go.mod: every k8s.io/* module
  #    it requires at v0.0.0 is a staging module replaced by ./staging upstream.
  local gomod
  gomod=$(cd "$w" && go mod download -json "k8s.io/kubernetes@v$K8S" | python3 -c 'import json,sys;print(json.load(sys.stdin)["GoMod"])')
  local staging
  staging=$(awk '$1 ~ /^k8s\.io\// && $2=="v0.0.0" {print $1}' "$gomod" | sort -u)
  [ -n "$staging" ] || { log "no staging modules found in $gomod"; exit 1; }
  # 2) A wrapper module with one replace per staging module.
  (
    cd "$w"
    go mod init example.invalid/kbins >/dev/null 2>&1
    for m in $staging; do go mod edit -replace="$m=$m@v$STG"; done
    go mod edit -require="k8s.io/kubernetes@v$K8S"
    go get -tool "k8s.io/kubernetes/cmd/kube-apiserver@v$K8S" >&2
    go get -tool "k8s.io/kubernetes/cmd/kubectl@v$K8S" >&2
    # Pin etcd to the version kube-apiserver itself is built against; a bare `go get`
    # would move to the newest etcd.
    etcdv=$(go list -m -f '{{.Version}}' go.etcd.io/etcd/server/v3)
    go get -tool "go.etcd.io/etcd/server/v3@$etcdv" >&2
    go mod tidy >&2
    minor=$(cut -d. -f2 <<<"$K8S")
    ldf="-s -w -X k8s.io/component-base/version.gitVersion=v$K8S -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor"
    mkdir -p "$OUT.tmp"
    go build -trimpath -ldflags "$ldf" -o "$OUT.tmp/kube-apiserver" k8s.io/kubernetes/cmd/kube-apiserver >&2
    go build -trimpath -ldflags "$ldf" -o "$OUT.tmp/kubectl" k8s.io/kubernetes/cmd/kubectl >&2
    go build -trimpath -ldflags "-s -w" -o "$OUT.tmp/etcd" go.etcd.io/etcd/server/v3 >&2
  )
  rm -rf "$OUT" && mv "$OUT.tmp" "$OUT"
}

# helm and promtool: one `go install` each, cached by version. The output is read whole
# before it is matched (see says_version).
helm_ok() {
  local out
  out=$("$HELM_OUT/helm" version --template '{{.Version}}' 2>/dev/null) || return 1
  [[ $out == "v$HELM" ]]
}
promtool_ok() {
  local out
  out=$("$PROMTOOL_OUT/promtool" --version 2>/dev/null) || return 1
  [[ $out == *"version $PROMTOOL "* ]]
}
# go_tool OUT PACKAGE@VERSION LDFLAGS: builds one binary into OUT (atomically).
go_tool() {
  local out=$1 pkg=$2 ldflags=$3
  log "building $pkg from the Go module proxy (cold: several minutes on 2 cores)"
  rm -rf "$out.tmp" && mkdir -p "$out.tmp"
  CGO_ENABLED=0 GOTOOLCHAIN=local GOFLAGS= GOBIN="$out.tmp" \
    go install -trimpath -ldflags "$ldflags" "$pkg" >&2
  rm -rf "$out" && mv "$out.tmp" "$out"
}
build_helm() {
  # helm's own Makefile sets its version the same way.
  go_tool "$HELM_OUT" "helm.sh/helm/v4/cmd/helm@v$HELM" \
    "-s -w -X helm.sh/helm/v4/internal/version.version=v$HELM"
}
build_promtool() {
  go_tool "$PROMTOOL_OUT" "github.com/prometheus/prometheus/cmd/promtool@$PROMTOOL_MODULE" \
    "-s -w -X github.com/prometheus/common/version.Version=$PROMTOOL"
}

# schemathesis: a virtualenv from PyPI. A virtualenv cannot be moved once made (its scripts
# name their interpreter by path), so it is made in place, and a marker written last says it
# is complete.
schemathesis_ok() {
  local out
  [ -f "$SCHEMATHESIS_OUT/.complete" ] || return 1
  out=$("$SCHEMATHESIS_OUT/bin/schemathesis" --version 2>/dev/null) || return 1
  [[ $out == *"version $SCHEMATHESIS" ]]
}
install_schemathesis() {
  log "installing schemathesis $SCHEMATHESIS from PyPI into $SCHEMATHESIS_OUT"
  rm -rf "$SCHEMATHESIS_OUT" && mkdir -p "$(dirname "$SCHEMATHESIS_OUT")"
  python3 -m venv "$SCHEMATHESIS_OUT" >&2
  "$SCHEMATHESIS_OUT/bin/pip" install --quiet --disable-pip-version-check \
    "schemathesis==$SCHEMATHESIS" >&2
  touch "$SCHEMATHESIS_OUT/.complete"
}

GUEST_IMAGE="$(dirname "$0")/guest-image.sh"
CLIENTS="$(dirname "$0")/clients.sh"

if [ "${1:-}" = --check-only ]; then
  binaries_ok || { log "the cached binaries in $OUT do not answer --version: a run would rebuild"; exit 1; }
  helm_ok || { log "no helm v$HELM in $HELM_OUT: a run would build it"; exit 1; }
  promtool_ok || { log "no promtool $PROMTOOL in $PROMTOOL_OUT: a run would build it"; exit 1; }
  schemathesis_ok || { log "no schemathesis $SCHEMATHESIS in $SCHEMATHESIS_OUT: a run would install it"; exit 1; }
  "$CLIENTS" --check-only || exit 1
  "$GUEST_IMAGE" --check-only || exit 1
  exit 0
fi
demo=
[ "${1:-}" = --demo ] && demo=--demo
install_debian_packages $demo
if binaries_ok; then
  log "kube-apiserver, kubectl v$K8S and etcd cached in $OUT"
else
  mkdir -p "$CACHE/kbins"
  build_control_plane
  binaries_ok || { log "built binaries do not answer --version"; exit 1; }
  log "built into $OUT"
fi
echo "export PROXY_OPERATOR_KBINS=$OUT"
[ -n "$demo" ] && exit 0
helm_ok || { build_helm; helm_ok || { log "the built helm does not say v$HELM"; exit 1; }; }
promtool_ok || { build_promtool; promtool_ok || { log "the built promtool does not say $PROMTOOL"; exit 1; }; }
log "helm v$HELM in $HELM_OUT, promtool $PROMTOOL in $PROMTOOL_OUT"
echo "export PROXY_OPERATOR_HELM=$HELM_OUT/helm"
echo "export PROXY_OPERATOR_PROMTOOL=$PROMTOOL_OUT/promtool"
schemathesis_ok || { install_schemathesis; schemathesis_ok || { log "the installed schemathesis does not say $SCHEMATHESIS"; exit 1; }; }
log "schemathesis $SCHEMATHESIS in $SCHEMATHESIS_OUT"
echo "export PROXY_OPERATOR_SCHEMATHESIS=$SCHEMATHESIS_OUT/bin/schemathesis"
"$CLIENTS"
"$GUEST_IMAGE"
