#!/usr/bin/env bash
# The one command that runs every test of the workspace on a fresh machine: installs the official x402
# clients (npm, PyPI) and a local chain (anvil from npm) into caches, then fmt, clippy, all tests.
set -euo pipefail
cd "$(dirname "$0")/.."

# shellcheck source=scripts/test-deps.sh
source scripts/test-deps.sh

echo "==> cargo fmt --check"
cargo fmt --all -- --check
echo "==> cargo clippy (warnings are errors)"
cargo clippy --workspace --all-targets -- -D warnings
echo "==> cargo test"
cargo test --workspace --all-targets
cargo test --workspace --doc
echo "==> cargo doc (warnings are errors)"
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps
