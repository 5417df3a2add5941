#!/usr/bin/env bash
# The project's test command (README, CI): installs what the tests need on a
# fresh Debian machine, then runs the format check, clippy with warnings as
# errors, every test of the workspace, and the self-heal demo as a smoke run.
set -euo pipefail
cd "$(dirname "$0")/.."

# etcd for the etcd backend tests (the harness starts its own servers on
# free loopback ports; the packaged service is never used).
if ! command -v etcd >/dev/null 2>&1; then
  echo "== installing etcd-server"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq etcd-server >/dev/null
fi

echo "== cargo fmt --check"
cargo fmt --all -- --check

echo "== cargo clippy -D warnings"
cargo clippy --workspace --all-targets -- -D warnings

echo "== cargo test"
cargo test --workspace --all-targets
cargo test --workspace --doc

echo "== demo: cargo run --example self_heal"
cargo run --quiet --example self_heal
