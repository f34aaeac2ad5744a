#!/usr/bin/env bash
# The proxy-operator container image, without a Docker engine or an image registry:
#
#   tests/bed/image.sh [build]   builds the release binary (default features: kubernetes and
#                                gcp providers), stages its root filesystem, and builds
#                                localhost/proxy-operator:<version> from deploy/Containerfile
#                                with podman (buildah's library). Prints the image reference.
#   tests/bed/image.sh run ARGS  runs that image as the Deployment would (user 65532, read-only
#                                root filesystem, every capability dropped, no privilege
#                                escalation), on the host's network, with ARGS after the image;
#                                the directories of KUBECONFIG and of every absolute path in
#                                ARGS are mounted read-only at the same path, and KUBECONFIG,
#                                DISCOVERY_TOKEN, RUST_LOG, LOG_FORMAT, POD_NAME, POD_NAMESPACE, POD_IP
#                                are passed through. The container is named $CONTAINER_NAME
#                                (default proxy-operator-$$), so a caller can remove it.
#
# The runtime is runc: Debian's crun refuses this machine's hybrid cgroup hierarchy. The
# sandbox these machines run in refuses rlimits above conmon's, so the container gets
# explicit ones (podman's defaults for root are higher).
# Environment: IMAGE (default localhost/proxy-operator:<version of shell/Cargo.toml>).
set -euo pipefail
cd "$(dirname "$0")/../.."
version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
IMAGE=${IMAGE:-localhost/proxy-operator:$version}
log() { printf 'image: %s\n' "$*" >&2; }
command -v podman >/dev/null || { log "podman is missing: run tests/bed/provision.sh"; exit 1; }

build() {
  log "building the release binary (cargo build --release -p proxy-operator)"
  cargo build --release --quiet --package proxy-operator --bin proxy-operator >&2
  local target=${CARGO_TARGET_DIR:-target}
  local ctx=$target/image
  rm -rf "$ctx" && mkdir -p "$ctx/rootfs/usr/local/bin" "$ctx/rootfs/etc/ssl/certs" \
    "$ctx/rootfs/etc/proxy-operator"
  local root=$ctx/rootfs
  strip -o "$root/usr/local/bin/proxy-operator" "$target/release/proxy-operator"
  # The shared libraries it links, and the dynamic loader, at their own paths.
  local lib
  for lib in $(ldd "$target/release/proxy-operator" | grep -o '/[^ ]*'); do
    mkdir -p "$root$(dirname "$lib")"
    cp -L "$lib" "$root$lib"
  done
  cp -L /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/"
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
  local env=() name
  for name in KUBECONFIG DISCOVERY_TOKEN RUST_LOG LOG_FORMAT POD_NAME POD_NAMESPACE POD_IP; do
    [ -n "${!name:-}" ] && env+=(--env "$name")
  done
  exec podman run --rm --runtime runc --name "${CONTAINER_NAME:-proxy-operator-$$}" \
    --network host --read-only --user 65532:65532 --cap-drop ALL \
    --security-opt no-new-privileges \
    --ulimit nofile=16384:16384 --ulimit nproc=4096:4096 \
    "${mounts[@]}" "${env[@]}" "$IMAGE" "$@"
}

case "${1:-build}" in
  build) build ;;
  run) shift; run "$@" ;;
  *) log "usage: $0 [build | run ARGS...]"; exit 2 ;;
esac
