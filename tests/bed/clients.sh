#!/usr/bin/env bash
# Provisions the crawler libraries the client shims (clients/) are tested with, idempotently,
# into the test bed's cache:
#   - Scrapy 2.19.0, Playwright 1.65.2 (the Python package, with its driver) and pytest in a
#     Python venv, $CACHE/clients/scrapy-2.19.0-playwright-1.65.2-<hash>, pinned whole by
#     clients/python/constraints.txt;
#   - Crawlee 3.18.1 (@crawlee/http, @crawlee/cheerio, @crawlee/playwright, @crawlee/core),
#     Playwright 1.65.2 and TypeScript (to check the package's types),
#     $CACHE/clients/crawlee-3.18.1-playwright-1.65.2-<hash>/node_modules, installed with `npm ci`
#     from the committed clients/js/package.json and package-lock.json.
# The directories are named by what they hold and by the first 12 hex digits of the hash of
# the file that pins them, so checkouts that pin other versions, or other packages beside
# the same versions, keep their own (and never reinstall over each other's).
# Neither Playwright downloads a browser (no download works here): the tests drive Debian's
# chromium, which provision.sh installs. Crawlee 4 is not installed: the npm registry
# reachable here serves no 4.x of crawlee or @crawlee/* (3.18.1 is its newest).
# Each is keyed by the SHA-256 of the file that pins it: a changed pin reinstalls, a warm run
# only compares two hashes and returns at once.
# Prints `export` lines for both directories, so callers can `eval` it (provision.sh does).
#
# `clients.sh --check-only` only runs those checks: exits 0 when the cache is good, 1 when a
# run would install (nothing is installed).
#
# Environment:
#   PROXY_OPERATOR_CACHE  cache root (default ${XDG_CACHE_HOME:-$HOME/.cache}/proxy-operator)
#   PYTHON                the Python to build the venv with (default python3; Scrapy needs >= 3.10)
set -euo pipefail

SCRAPY=2.19.0
PLAYWRIGHT=1.65.2
CRAWLEE=3.18.1
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
CACHE=${PROXY_OPERATOR_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/proxy-operator}
CONSTRAINTS=$ROOT/clients/python/constraints.txt
LOCK=$ROOT/clients/js/package-lock.json
log() { printf 'clients: %s\n' "$*" >&2; }

hash_of() { sha256sum "$1" | cut -d' ' -f1; }

VENV=$CACHE/clients/scrapy-$SCRAPY-playwright-$PLAYWRIGHT-$(hash_of "$CONSTRAINTS" | cut -c1-12)
MODULES=$CACHE/clients/crawlee-$CRAWLEE-playwright-$PLAYWRIGHT-$(hash_of "$LOCK" | cut -c1-12)

# The venv is good when it was built from these constraints and still has its python.
scrapy_ok() {
  [ -x "$VENV/bin/python" ] && [ -f "$VENV/.constraints.sha256" ] \
    && [ "$(cat "$VENV/.constraints.sha256")" = "$(hash_of "$CONSTRAINTS")" ]
}

# The modules are good when they were installed from this lock file.
crawlee_ok() {
  [ -f "$MODULES/node_modules/@crawlee/http/package.json" ] \
    && [ -f "$MODULES/node_modules/@crawlee/cheerio/package.json" ] \
    && [ -f "$MODULES/node_modules/@crawlee/playwright/package.json" ] \
    && [ -f "$MODULES/node_modules/typescript/bin/tsc" ] && [ -f "$MODULES/.lock.sha256" ] \
    && [ "$(cat "$MODULES/.lock.sha256")" = "$(hash_of "$LOCK")" ]
}

install_scrapy() {
  log "installing Scrapy $SCRAPY, Playwright $PLAYWRIGHT and pytest into $VENV (from PyPI, pinned by clients/python/constraints.txt)"
  # A venv's scripts name its directory, so it is built in place; the hash, written last,
  # marks it complete (an interrupted run leaves none, and the next one starts over).
  rm -rf "$VENV"
  "${PYTHON:-python3}" -m venv "$VENV"
  "$VENV/bin/pip" install --quiet --disable-pip-version-check -c "$CONSTRAINTS" \
    "scrapy==$SCRAPY" "playwright==$PLAYWRIGHT" pytest >&2
  hash_of "$CONSTRAINTS" > "$VENV/.constraints.sha256"
}

install_crawlee() {
  log "installing Crawlee $CRAWLEE and Playwright $PLAYWRIGHT into $MODULES (npm ci from clients/js/package-lock.json)"
  rm -rf "$MODULES.tmp" && mkdir -p "$MODULES.tmp"
  cp "$ROOT/clients/js/package.json" "$LOCK" "$MODULES.tmp/"
  (cd "$MODULES.tmp" && npm ci --no-audit --no-fund --ignore-scripts --loglevel=error >&2)
  hash_of "$LOCK" > "$MODULES.tmp/.lock.sha256"
  rm -rf "$MODULES" && mv "$MODULES.tmp" "$MODULES"
}

if [ "${1:-}" = --check-only ]; then
  scrapy_ok || { log "no Scrapy $SCRAPY venv built from clients/python/constraints.txt in $VENV: a run would install it"; exit 1; }
  crawlee_ok || { log "no Crawlee $CRAWLEE and Playwright modules installed from clients/js/package-lock.json in $MODULES: a run would install them"; exit 1; }
  exit 0
fi
mkdir -p "$CACHE/clients"
scrapy_ok || { install_scrapy; scrapy_ok || { log "the venv in $VENV is not complete"; exit 1; }; }
crawlee_ok || { install_crawlee; crawlee_ok || { log "the modules in $MODULES are not complete"; exit 1; }; }
log "Scrapy $SCRAPY in $VENV, Crawlee $CRAWLEE in $MODULES"
echo "export PROXY_OPERATOR_SCRAPY=$VENV"
echo "export PROXY_OPERATOR_CRAWLEE=$MODULES"
