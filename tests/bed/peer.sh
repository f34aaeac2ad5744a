#!/usr/bin/env bash
# Builds the Go gateway bench-gateway compares the gateway with, idempotently, into the test
# bed's cache: glider (github.com/nadoo/glider, a forward proxy that rotates over upstream
# proxies), from the Go module proxy, at $CACHE/glider/v$GLIDER/glider. Never committed.
#
# Why glider: the issue names gost, glider and mubeng, "whichever builds". The Go module
# proxy reachable here refuses every version of gost (github.com/go-gost/gost, /v3,
# github.com/ginuerzh/gost) and of mubeng (github.com/mubeng/mubeng, github.com/kitabisa/mubeng),
# and the version list of glider; it serves glider's release versions by name. `go install
# pkg@version` asks for that list (for deprecation notices) and fails, so the build goes
# through a throwaway module that requires the version, as provision.sh builds the control
# plane.
# A warm run checks the marker written after a complete build and returns at once.
# Prints an `export` line for the binary, so callers can `eval` it.
#
# Environment:
#   GLIDER_VERSION        glider to build (default 0.16.4)
#   PROXY_OPERATOR_CACHE  cache root (default ${XDG_CACHE_HOME:-$HOME/.cache}/proxy-operator)
set -euo pipefail

GLIDER=${GLIDER_VERSION:-0.16.4}
CACHE=${PROXY_OPERATOR_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/proxy-operator}
OUT=$CACHE/glider/v$GLIDER
log() { printf 'peer: %s\n' "$*" >&2; }

# The help is read whole before it is matched: `cmd | grep -q` under pipefail fails when grep
# exits at the first match while cmd still writes (see provision.sh's says_version).
glider_ok() {
  local out
  [ -x "$OUT/glider" ] && [ -f "$OUT/.complete" ] || return 1
  out=$("$OUT/glider" -help 2>&1) || true
  [[ $out == *"-forward"* ]]
}

build_glider() {
  log "building glider v$GLIDER from the Go module proxy (cold: about a minute on 2 cores)"
  local w; w=$(mktemp -d)
  trap 'rm -rf "$w"' RETURN
  rm -rf "$OUT" && mkdir -p "$OUT"
  (
    cd "$w"
    go mod init example.invalid/peer >/dev/null 2>&1
    go mod edit -require="github.com/nadoo/glider@v$GLIDER"
    CGO_ENABLED=0 GOTOOLCHAIN=local GOFLAGS=-mod=mod \
      go build -trimpath -ldflags "-s -w" -o "$OUT/glider" github.com/nadoo/glider >&2
  )
  touch "$OUT/.complete"
}

glider_ok || { build_glider; glider_ok || { log "the built glider does not run"; exit 1; }; }
log "glider v$GLIDER in $OUT"
echo "export PROXY_OPERATOR_GLIDER=$OUT/glider"
