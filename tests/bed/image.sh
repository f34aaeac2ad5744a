#!/usr/bin/env bash
# The proxy-operator container image, without a Docker engine or an image registry:
#
#   tests/bed/image.sh [build] [--kvm]
#                                builds the release binary, stages its root filesystem, and
#                                builds the image from deploy/Containerfile with podman
#                                (buildah's library). Prints the image reference.
#                                Default: localhost/proxy-operator:<version>, the default
#                                features (the kubernetes and gcp providers).
#                                --kvm: localhost/proxy-operator:<version>-kvm, built with
#                                `--features kvm`, with libvirt's client libraries and an ssh
#                                client (/usr/bin/ssh and its libraries) for qemu+ssh:// hosts.
#                                Both builds share the target directory and its dependencies;
#                                cargo keeps each one's binary apart (target/release/deps), so
#                                building one after the other only copies it back into place.
#   tests/bed/image.sh run [--kvm] ARGS
#                                runs that image as the Deployment would (user 65532, read-only
#                                root filesystem, every capability dropped, no privilege
#                                escalation), on the host's network, with ARGS after the image;
#                                the directories of KUBECONFIG and of every absolute path in
#                                ARGS are mounted read-only at the same path, and KUBECONFIG,
#                                DISCOVERY_TOKEN, RUST_LOG, LOG_FORMAT, POD_NAME, POD_NAMESPACE,
#                                POD_IP, GOOGLE_APPLICATION_CREDENTIALS are passed through.
#                                VOLUMES adds podman --volume specs (space-separated
#                                SRC:DST[:OPTS]): what the Pod would mount beyond the providers
#                                config, e.g. a key Secret or a libvirt socket. The container is
#                                named $CONTAINER_NAME (default proxy-operator-$$), so a caller
#                                can remove it.
#
# What the kvm image carries beyond `ldd`: nothing is loaded at run time that ldd does not
# name for the URIs the provider uses (checked with strace: test:///, qemu+unix:// and
# qemu+ssh:// open only the linked libraries, an optional /etc/libvirt/libvirt.conf, and for
# ssh /etc/passwd, /etc/nsswitch.conf and an optional /etc/ssh/ssh_config and
# /usr/lib/ssl/openssl.cnf). libvirt runs `ssh` from PATH (the Containerfile sets it). Not
# carried: SASL plugins (/usr/lib/x86_64-linux-gnu/sasl2, for qemu+tcp:// or a daemon that
# demands SASL) and /etc/pki for qemu+tls:// (mount them with the chart's extraVolumes).
#
# The runtime is runc: Debian's crun refuses this machine's hybrid cgroup hierarchy. The
# sandbox these machines run in refuses rlimits above conmon's, so the container gets
# explicit ones (podman's defaults for root are higher).
# Environment: VARIANT (kvm, as --kvm), IMAGE (default localhost/proxy-operator:<version of
# Cargo.toml>[-kvm]), PROXY_OPERATOR_IMAGE_BINARIES: a directory holding an already built
# `proxy-operator` (default features) and `proxy-operator-kvm` (`--features kvm`), staged
# instead of building the release binary. The suite sets it (tests/bed/run-tests.sh): its
# images carry the debug binaries it builds for its other tests anyway, what the image
# tests check being the image (the staged libraries, the user, the read-only root, podman
# and runc), not the optimizer; two whole-program-optimized builds took about 10 of the
# 30 minutes of a warm run (docs/testing.md, "Where the time goes").
set -euo pipefail
cd "$(dirname "$0")/../.."
version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
log() { printf 'image: %s\n' "$*" >&2; }
command -v podman >/dev/null || { log "podman is missing: run tests/bed/provision.sh"; exit 1; }
verb=${1:-build}
[ $# -gt 0 ] && shift
VARIANT=${VARIANT:-}
if [ "${1:-}" = --kvm ]; then VARIANT=kvm; shift; fi
case "$VARIANT" in
  "" | kvm) ;;
  *) log "unknown VARIANT $VARIANT (the variants: kvm)"; exit 2 ;;
esac
IMAGE=${IMAGE:-localhost/proxy-operator:$version${VARIANT:+-$VARIANT}}

build() {
  local target=${CARGO_TARGET_DIR:-target}
  local cargo=(cargo build --release --quiet --package proxy-operator --bin proxy-operator)
  local executables=()
  if [ "$VARIANT" = kvm ]; then
    # libvirt.so.0 (Debian's libvirt0, with libvirt-dev to build) and ssh (openssh-client).
    local need
    for need in /usr/lib/x86_64-linux-gnu/pkgconfig/libvirt.pc /usr/bin/ssh; do
      [ -e "$need" ] || { log "$need is missing: apt-get install libvirt-dev openssh-client (tests/bed/provision.sh does)"; exit 1; }
    done
    cargo+=(--features kvm)
    executables+=(/usr/bin/ssh)
  fi
  local staged=${PROXY_OPERATOR_IMAGE_BINARIES:+$PROXY_OPERATOR_IMAGE_BINARIES/proxy-operator${VARIANT:+-$VARIANT}}
  if [ -n "$staged" ] && [ ! -x "$staged" ]; then
    log "PROXY_OPERATOR_IMAGE_BINARIES names no executable $staged"
    exit 1
  fi
  local ctx=$target/image${VARIANT:+-$VARIANT}
  rm -rf "$ctx" && mkdir -p "$ctx/rootfs/usr/local/bin" "$ctx/rootfs/etc/ssl/certs" \
    "$ctx/rootfs/etc/proxy-operator"
  local root=$ctx/rootfs
  # Both variants put their binary at target/release/proxy-operator: one build at a time
  # from cargo to the copy (the two image tests run in parallel).
  mkdir -p "$target"
  exec 9>"$target/.image-build.lock"
  flock 9
  if [ -n "$staged" ]; then
    log "staging $staged (PROXY_OPERATOR_IMAGE_BINARIES)"
    strip -o "$root/usr/local/bin/proxy-operator" "$staged"
  else
    log "building the release binary (${cargo[*]})"
    "${cargo[@]}" >&2
    strip -o "$root/usr/local/bin/proxy-operator" "$target/release/proxy-operator"
  fi
  flock -u 9
  # The copy is the variant's (a build of the other one by anything else meanwhile would
  # have replaced it).
  local links_libvirt=no
  ldd "$root/usr/local/bin/proxy-operator" | grep 'libvirt\.so' >/dev/null && links_libvirt=yes
  if [ "$links_libvirt" != "$([ "$VARIANT" = kvm ] && echo yes || echo no)" ]; then
    log "${staged:-target/release/proxy-operator} is not the ${VARIANT:-default} build (another build replaced it): run again"
    exit 1
  fi
  local exe
  for exe in "${executables[@]}"; do
    mkdir -p "$root$(dirname "$exe")"
    cp -L "$exe" "$root$exe"
  done
  # The shared libraries they link, and the dynamic loader, at their own paths.
  local lib
  for lib in $(for exe in "$root/usr/local/bin/proxy-operator" "${executables[@]}"; do ldd "$exe"; done \
      | grep -o '/[^ ]*' | sort -u); do
    mkdir -p "$root$(dirname "$lib")"
    cp -L "$lib" "$root$lib"
  done
  cp -L /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/"
  # User 65532's home is /: ssh reads /.ssh/config, /.ssh/known_hosts and /.ssh/id_* (a Secret
  # mounted there, docs/kvm.md).
  printf 'root:x:0:0::/:/nonexistent\nnonroot:x:65532:65532::/:/nonexistent\n' > "$root/etc/passwd"
  printf 'root:x:0:\nnonroot:x:65532:\n' > "$root/etc/group"
  printf 'hosts: files dns\n' > "$root/etc/nsswitch.conf"
  chmod -R go-w "$root"
  podman build --quiet --file deploy/Containerfile --tag "$IMAGE" "$ctx" >&2
  log "built $IMAGE ($(podman image inspect --format '{{.Size}}' "$IMAGE") bytes)"
  echo "$IMAGE"
}

run() {
  podman image exists "$IMAGE" || { log "no image $IMAGE: run tests/bed/image.sh build"; exit 1; }
  local mounts=() dirs=() arg dir
  [ -n "${KUBECONFIG:-}" ] && dirs+=("$(dirname "$KUBECONFIG")")
  for arg in "$@"; do
    arg=${arg#*=}
    [[ $arg == /* && -e $arg ]] || continue
    if [ -d "$arg" ]; then dirs+=("$arg"); else dirs+=("$(dirname "$arg")"); fi
  done
  for dir in $(printf '%s\n' "${dirs[@]}" | sort -u); do mounts+=(--volume "$dir:$dir:ro"); done
  local volume
  for volume in ${VOLUMES:-}; do mounts+=(--volume "$volume"); done
  local env=() name
  for name in KUBECONFIG DISCOVERY_TOKEN RUST_LOG LOG_FORMAT POD_NAME POD_NAMESPACE POD_IP \
      GOOGLE_APPLICATION_CREDENTIALS; do
    [ -n "${!name:-}" ] && env+=(--env "$name")
  done
  exec podman run --rm --runtime runc --name "${CONTAINER_NAME:-proxy-operator-$$}" \
    --network host --read-only --user 65532:65532 --cap-drop ALL \
    --security-opt no-new-privileges \
    --ulimit nofile=16384:16384 --ulimit nproc=4096:4096 \
    "${mounts[@]}" "${env[@]}" "$IMAGE" "$@"
}

case "$verb" in
  build) build ;;
  run) run "$@" ;;
  *) log "usage: $0 [build [--kvm] | run [--kvm] ARGS...]"; exit 2 ;;
esac
