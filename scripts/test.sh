#!/usr/bin/env bash
# The one command that runs every test of the workspace on a fresh machine: installs the official x402
# clients (npm, PyPI) and a local chain (anvil from npm) into caches, starts a throwaway PostgreSQL cluster
# and Redis server on loopback (stopped by PID on exit), then fmt, clippy, all tests: the reference server's
# integration suite once on SQLite and once on PostgreSQL.
set -euo pipefail
cd "$(dirname "$0")/.."

# shellcheck source=scripts/test-deps.sh
source scripts/test-deps.sh
# shellcheck source=scripts/test-services.sh
source scripts/test-services.sh

echo "==> cargo fmt --check"
cargo fmt --all -- --check
echo "==> cargo clippy (warnings are errors)"
cargo clippy --workspace --all-targets -- -D warnings
echo "==> cargo test"
cargo test --workspace --all-targets
echo "==> reference-server integration suite on PostgreSQL"
REFERENCE_SERVER_TEST_POSTGRES="$X402_TEST_POSTGRES_ADMIN" cargo test -p reference-server --test it
cargo test --workspace --doc
echo "==> cargo doc (warnings are errors)"
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps
