#!/usr/bin/env bash
# The whole test suite, on a fresh machine or a warm one: provisions the test bed (cached
# kube-apiserver, etcd, kubectl; Debian's squid), then runs every test of the workspace —
# unit, property, CEL, and the end-to-end tests against the real control plane and squid,
# and the kvm provider's, with real VMs (libvirt, qemu and the guest image); the Helm chart
# (helm), the alert rules (promtool) and the container image (podman), built and run
# against the same control plane; and schemathesis fuzzing the discovery API of a live operator.
#
# How (docs/testing.md, "Where the time goes"), each phase timed (`==> phase: N s`):
#   1. provisioning: cached, seconds when warm;
#   2. one build: every test binary of the workspace and the operator binary the end-to-end
#      tests run, in one cargo invocation, so that the features the tests unify are the
#      binary's too and nothing is compiled twice; then the operator with its default
#      features (the default image's; .ci/run's CRD check runs it again for nothing);
#   3. the two images, staged from those two binaries (tests/bed/image.sh,
#      PROXY_OPERATOR_IMAGE_BINARIES): podman, seconds; no release build;
#   4. the tests, one process after the other: the end-to-end tests (`tests/tests/e2e/`) in
#      the groups of E2E_GROUPS below, each a test process of its own (its own control plane,
#      libvirtd and test threads), then every other test binary of the workspace, as
#      `cargo test --workspace` runs them (every test target cargo metadata lists but e2e,
#      then the doc tests). Side by side on 2 cores they overloaded the machine: timeouts of
#      real processes failed a dozen tests that pass alone (docs/testing.md).
#      Each group's output is shown as it runs, then every group's summary lines; the
#      script fails when any test failed.
# Extra arguments go to every `cargo test`: cargo's before `--`, the test binaries' after it
# (options such as `-- --nocapture`; to run some tests by name, run `cargo test` itself).
set -euo pipefail
cd "$(dirname "$0")/../.."
target=${CARGO_TARGET_DIR:-target}

started=$SECONDS
phase() { printf '==> %s: %s s\n' "$1" $((SECONDS - started)); started=$SECONDS; }

# Not `eval "$(provision.sh)"`: that evaluates what a failed provisioning printed and goes
# on (a failed npm install once left the shims and the guest image out of a CI run).
exports=$(tests/bed/provision.sh) || { echo 'provisioning failed (above)' >&2; exit 1; }
eval "$exports"
export PROXY_OPERATOR_KBINS PROXY_OPERATOR_GUEST PROXY_OPERATOR_HELM PROXY_OPERATOR_PROMTOOL \
  PROXY_OPERATOR_SCHEMATHESIS PROXY_OPERATOR_SCRAPY PROXY_OPERATOR_CRAWLEE
phase provisioning

cargo_args=() test_args=()
while [ $# -gt 0 ] && [ "$1" != -- ]; do cargo_args+=("$1"); shift; done
[ $# -gt 0 ] && shift
test_args=("$@")

# The operator as the end-to-end tests run it: with the kvm provider, which the tests crate
# enables, and built in the same invocation as the tests.
binaries=$target/suite
mkdir -p "$binaries"
cargo build --workspace --bins --tests "${cargo_args[@]}"
cp "$target/debug/proxy-operator" "$binaries/proxy-operator-kvm"
export PROXY_OPERATOR_BINARY=$PWD/$binaries/proxy-operator-kvm
phase "build: the tests and the operator with kvm"
cargo build --package proxy-operator --bin proxy-operator "${cargo_args[@]}"
cp "$target/debug/proxy-operator" "$binaries/proxy-operator"
phase "build: the operator with its default features"

export PROXY_OPERATOR_IMAGE_BINARIES=$PWD/$binaries
tests/bed/image.sh build >/dev/null
tests/bed/image.sh build --kvm >/dev/null
phase "images"

# The end-to-end groups: "THREADS MODULE..." each (a module of tests/tests/e2e/), the one
# with `*` every module no other group names; a group's tests run THREADS at a time. Each
# control plane serves two tests at a time, as when the e2e binary ran alone on 2 cores;
# by default the e2e tests are one group. E2E_GROUPS overrides it, one group a line (e.g.
# E2E_GROUPS=$'2 crawlers\n2 *' runs the crawlers apart from the rest).
if [ -n "${E2E_GROUPS:-}" ]; then
  mapfile -t E2E_GROUPS <<<"$E2E_GROUPS"
else
  E2E_GROUPS=("2 *")
fi
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
# Every e2e test by its module; each group gets the exact names of its modules' tests.
cargo test --quiet --workspace --test e2e "${cargo_args[@]}" -- --list --format terse \
  | sed -n 's/: test$//p' > "$logs/e2e.list"
total=$(wc -l < "$logs/e2e.list")
named=()
for group in "${E2E_GROUPS[@]}"; do
  read -r _ modules <<<"$group"
  if [ "$modules" != '*' ]; then read -r -a more <<<"$modules"; named+=("${more[@]}"); fi
done
names=() threads=()
for group in "${E2E_GROUPS[@]}"; do
  read -r n modules <<<"$group"
  if [ "$modules" = '*' ]; then
    pattern="^($(IFS='|'; echo "${named[*]}"))::"
    grep -Ev "$pattern" "$logs/e2e.list" > "$logs/group.${#names[@]}" || true
  else
    pattern="^($(tr ' ' '|' <<<"$modules"))::"
    grep -E "$pattern" "$logs/e2e.list" > "$logs/group.${#names[@]}" || true
  fi
  names+=("e2e: ${modules/\*/the rest} ($(wc -l < "$logs/group.${#names[@]}") tests, $n at a time)")
  threads+=("$n")
done
assigned=$(cat "$logs"/group.* | sort -u | wc -l)
if [ "$assigned" -ne "$total" ] || [ "$(cat "$logs"/group.* | wc -l)" -ne "$total" ]; then
  printf 'the e2e groups take %s of the %s tests, or one twice\n' "$assigned" "$total" >&2
  exit 1
fi

# job I COMMAND...: runs COMMAND, its output shown and kept in out.I, its time in time.I.
ran=()
job() {
  local i=$1; shift
  local begun=$SECONDS rc=0
  printf '\n==> %s\n' "${names[$i]}"
  "$@" 2>&1 | tee "$logs/out.$i" || rc=$?
  echo $((SECONDS - begun)) >"$logs/time.$i"
  ran+=("$i")
  if [ "$rc" -eq 0 ]; then status=ok; else status=FAILED; failed+=("${names[$i]}"); fi
  printf '==> %s: %s (%s s)\n' "${names[$i]}" "$status" "$(cat "$logs/time.$i")"
}
failed=()
for i in "${!names[@]}"; do
  mapfile -t tests <"$logs/group.$i"
  [ ${#tests[@]} -gt 0 ] || continue
  job "$i" cargo test --workspace --test e2e "${cargo_args[@]}" -- --exact \
    --test-threads "${threads[$i]}" "${test_args[@]}" "${tests[@]}"
done
# Every other test of `cargo test --workspace`: the libraries' and binaries' unit tests,
# every integration test target but e2e, then the doc tests.
mapfile -t targets < <(cargo metadata --no-deps --format-version 1 | python3 -c '
import json, sys
for package in json.load(sys.stdin)["packages"]:
    for target in package["targets"]:
        if "test" in target["kind"] and target["name"] != "e2e":
            print("--test=" + target["name"])' | sort -u)
others() {
  local rc=0
  cargo test --workspace --no-fail-fast --lib --bins "${targets[@]}" "${cargo_args[@]}" \
    -- "${test_args[@]}" || rc=$?
  cargo test --workspace --no-fail-fast --doc "${cargo_args[@]}" -- "${test_args[@]}" || rc=$?
  return "$rc"
}
others=${#names[@]}
names+=("every other test binary (cargo test --workspace, but e2e)")
job "$others" others

phase "tests"

printf '\nSummary (e2e: %s tests in %s groups):\n' "$total" $((${#names[@]} - 1))
for i in "${ran[@]}"; do
  printf '%s\n' "${names[$i]}"
  grep -E '^test result:|Running ' "$logs/out.$i" | sed 's/^/  /'
done
# Why each failing test failed, in a few lines: where it panicked and the first lines of its
# message, up to the output it quotes (a crawler's stdout, a squid log) or its backtrace, so
# that the end of a long run says it: a CI log shown by its ends keeps only a dozen lines of
# its tail. Also kept in $target/test-failures.txt, which .ci/run prints again as its last
# words.
why=$target/test-failures.txt
rm -f "$why"
if [ ${#failed[@]} -gt 0 ]; then
  for i in "${ran[@]}"; do
    awk '/^---- .* stdout ----$/ { test = $2; shown = 0; next }
         /^failures:$/ { test = ""; shown = 0 }
         test != "" && /panicked at/ { shown = 4; print "--- " test }
         shown > 0 && /^(stdout|stderr|squid|stack backtrace):$/ { shown = 0 }
         shown > 0 { print "  " substr($0, 1, 700); shown-- }' "$logs/out.$i"
  done > "$why"
  printf '\nWhy they failed (each panic, first lines; all of it above):\n'
  cat "$why"
  printf '\nfailed: %s\n' "${failed[*]}"
  exit 1
fi
