#!/usr/bin/env bash
# The one command that runs every test of the workspace on a fresh machine.
set -euo pipefail
cd "$(dirname "$0")/.."

echo "==> cargo fmt --check"
cargo fmt --all -- --check
echo "==> cargo clippy (warnings are errors)"
cargo clippy --workspace --all-targets -- -D warnings
echo "==> cargo test"
cargo test --workspace --all-targets
cargo test --workspace --doc
