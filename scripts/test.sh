#!/usr/bin/env bash
# The one command that runs every test of the workspace on a fresh machine: installs the official x402
# clients (npm, PyPI) and a local chain (anvil from npm) into caches, starts a throwaway PostgreSQL cluster
# and Redis server on loopback (stopped by PID on exit), then fmt, clippy, all tests: the reference server's
# integration suite once on SQLite and once on PostgreSQL.
set -euo pipefail
cd "$(dirname "$0")/.."

# How long each part took, printed at the end (also when a part fails).
_parts=()
_part_name="cargo fmt --check"
_part_start=$SECONDS
part() { # name of the part that starts now
    _parts+=("$(printf '%5d s  %s' $((SECONDS - _part_start)) "$_part_name")")
    _part_name="$1"
    _part_start=$SECONDS
    echo "==> $1"
}
_report_parts() {
    _parts+=("$(printf '%5d s  %s' $((SECONDS - _part_start)) "$_part_name")")
    echo "==> time of each part (total ${SECONDS} s)"
    printf '    %s\n' "${_parts[@]}"
}

# No test binary runs longer than this (a hang fails loudly instead of eating CI's time): cargo runs every
# test binary through `timeout`.
TEST_BINARY_TIMEOUT_SECS="${TEST_BINARY_TIMEOUT_SECS:-1500}"
_host="$(rustc -vV | sed -n 's/^host: //p')"
export "CARGO_TARGET_$(tr 'a-z-' 'A-Z_' <<<"$_host")_RUNNER=timeout --kill-after=10 $TEST_BINARY_TIMEOUT_SECS"

# The connection tests hold 2,200 sockets in one process (and the server under test as many): raise the
# soft limit on open files, or fail here.
if [ "$(ulimit -n)" != unlimited ] && [ "$(ulimit -n)" -lt 8192 ]; then
    ulimit -n 8192 2>/dev/null || ulimit -n "$(ulimit -Hn)"
fi
if [ "$(ulimit -n)" != unlimited ] && [ "$(ulimit -n)" -lt 4500 ]; then
    echo "error: open files are limited to $(ulimit -n) (hard limit $(ulimit -Hn)); the connection tests need 4,500" >&2
    exit 1
fi

# The downloads (npm, PyPI, Debian's Chromium, PostgreSQL and Redis packages) wait on the network while fmt
# and clippy keep the CPU busy: they run in the background, logged to target/test-setup.log, and the tests
# wait for them below.
mkdir -p target
(
    set -e
    # shellcheck source=scripts/test-deps.sh
    source scripts/test-deps.sh
    X402_SERVICES_INSTALL_ONLY=1 source scripts/test-services.sh
) >target/test-setup.log 2>&1 &
_setup_pid=$!
trap '_report_parts; kill "$_setup_pid" 2>/dev/null || true' EXIT
echo "==> set-up (npm, PyPI, Chromium, PostgreSQL, Redis) in the background: target/test-setup.log"

# Runs a test binary with a filter and fails when the filter matched no test.
run_filtered() { # dir, binary, filter
    local out
    out="$(cd "$1" && timeout --kill-after=10 "$TEST_BINARY_TIMEOUT_SECS" "$2" "$3" 2>&1)" || { echo "$out"; return 1; }
    echo "$out"
    grep -qE '^test result: ok\. [1-9][0-9]* passed' <<<"$out" \
        || { echo "error: the filter '$3' matched no test of $2" >&2; return 1; }
}

echo "==> cargo fmt --check"
cargo fmt --all -- --check
part "cargo clippy (warnings are errors)"
cargo clippy --workspace --all-targets --features x402-tower/redis,x402-tower/metrics,x402-tower/reqwest-middleware -- -D warnings
part "layout: no import cycle between top-level modules, no file above 700 lines, x402-tower's root (docs/architecture.md)"
python3 scripts/check-layout.py
part "each library feature builds alone, without warnings"
for features in "" facilitator redis metrics openapi client offer-receipt reqwest-middleware onchain test-util; do
    echo "    x402-tower: --no-default-features ${features:+--features $features}"
    cargo clippy -q -p x402-tower --lib --no-default-features ${features:+--features "$features"} -- -D warnings
done
for features in "" axum; do
    echo "    registry-pagination: --no-default-features ${features:+--features $features}"
    cargo clippy -q -p registry-pagination --lib --no-default-features ${features:+--features "$features"} -- -D warnings
done
part "set-up: the background downloads' end, PostgreSQL and Redis started"
wait "$_setup_pid" || { cat target/test-setup.log >&2; echo "error: the set-up failed (target/test-setup.log above)" >&2; exit 1; }
cat target/test-setup.log
# Both only check and export now (installed above), and start the servers.
# shellcheck source=scripts/test-deps.sh
source scripts/test-deps.sh
# shellcheck source=scripts/test-services.sh
source scripts/test-services.sh
# After the services' own EXIT trap is set: report the parts, then stop the services.
trap '_report_parts; _svc_stop' EXIT
part "cargo test"
# x402-tower's Redis replay store is a cargo feature: built and tested here against the Redis started above.
cargo test --workspace --all-targets --features x402-tower/redis,x402-tower/metrics,x402-tower/reqwest-middleware
part "the examples: each seller answers an unpaid request 402, the listing serves a page"
# The artifacts cargo test built, linked into target/debug/examples/ under their names.
cargo build -q --workspace --examples --features x402-tower/redis,x402-tower/metrics,x402-tower/reqwest-middleware
for example in seller_axum seller_tower seller_facilitator listing; do
    timeout 60 target/debug/examples/"$example" --check
done
part "cargo package: x402-tower and registry-pagination build from their packaged files alone"
cargo package -q -p registry-pagination -p x402-tower --allow-dirty
part "deploy/: the systemd unit and its environment file"
scripts/check-deploy.sh target/debug/reference-server
part "reference-server on PostgreSQL: the integration suite, and the library's PostgreSQL-only unit tests"
# The same test binaries the line above built and ran on SQLite (no second build), pointed at PostgreSQL.
bins="$(cargo test --workspace --all-targets --features x402-tower/redis,x402-tower/metrics,x402-tower/reqwest-middleware --no-run --message-format=json 2>/dev/null \
    | python3 -c 'import json, sys
for m in map(json.loads, sys.stdin):
    if m.get("reason") == "compiler-artifact" and m.get("executable") and "reference-server" in m["package_id"]:
        if m["target"]["name"] == "it":
            print("it", m["executable"])
        elif m["target"]["kind"] == ["lib"] and m["profile"]["test"]:
            print("lib", m["executable"])')"
it_bin="$(awk '$1 == "it" {print $2}' <<<"$bins")"
lib_bin="$(awk '$1 == "lib" {print $2}' <<<"$bins")"
[ -x "$it_bin" ] || { echo "error: reference-server's integration test binary not found" >&2; exit 1; }
[ -x "$lib_bin" ] || { echo "error: reference-server's library test binary not found" >&2; exit 1; }
(cd reference-server && REFERENCE_SERVER_TEST_POSTGRES="$X402_TEST_POSTGRES_ADMIN" timeout --kill-after=10 "$TEST_BINARY_TIMEOUT_SECS" "$it_bin")
REFERENCE_SERVER_TEST_POSTGRES="$X402_TEST_POSTGRES_ADMIN" run_filtered reference-server "$lib_bin" store::postgres::
part "doc tests"
cargo test --workspace --doc --features x402-tower/redis,x402-tower/metrics,x402-tower/reqwest-middleware
part "cargo doc (warnings are errors)"
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --features x402-tower/redis,x402-tower/metrics,x402-tower/reqwest-middleware
part "fuzz: each target of fuzz/ for 10 s (docs/testing.md)"
FUZZ_SECONDS=10 scripts/fuzz.sh
