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

# headless Chromium for the status page test (crates/steadfast-web/tests/status_page_chromium.rs).
if ! command -v chromium >/dev/null 2>&1; then
  echo "== installing chromium"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
fi

echo "== cargo fmt --check"
cargo fmt --all -- --check

echo "== cargo clippy -D warnings"
cargo clippy --workspace --all-targets -- -D warnings
# the awc client factory and AwcCaller are behind a feature
cargo clippy -p steadfast-web --all-targets --features awc -- -D warnings

echo "== cargo test"
cargo test --workspace --all-targets
cargo test --workspace --doc
cargo test -p steadfast-web --all-targets --features awc

echo "== demo: cargo run --example self_heal"
cargo run --quiet --example self_heal
echo "== demo: self_heal --print-metrics ends with the Prometheus exposition"
cargo run --quiet --example self_heal -- --print-metrics | tail -n 1 | grep -qx '# EOF'

echo "== story: cargo run --example call_through (etcd when on PATH: a SIGKILL and a graceful restart, 0 failed calls)"
cargo run --quiet --example call_through

echo "== demo against a real etcd"
ETCD_DIR=$(mktemp -d /tmp/steadfast-demo-etcd.XXXXXX)
read -r ETCD_PORT ETCD_PEER_PORT < <(python3 -c 'import socket
s=[socket.socket() for _ in range(2)]
[x.bind(("127.0.0.1",0)) for x in s]
print(*[x.getsockname()[1] for x in s])')
etcd --name demo --data-dir "$ETCD_DIR/data" \
  --listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
  --listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
  --initial-cluster "demo=http://127.0.0.1:$ETCD_PEER_PORT" \
  --logger=zap --log-outputs=stderr --log-level=warn >"$ETCD_DIR/etcd.log" 2>&1 &
ETCD_PID=$!
trap 'kill "$ETCD_PID" 2>/dev/null || true; wait "$ETCD_PID" 2>/dev/null || true; rm -rf "$ETCD_DIR"' EXIT
for _ in $(seq 1 100); do
  if curl -fsS -m 1 "http://127.0.0.1:$ETCD_PORT/health" 2>/dev/null | grep -q '"health":"true"'; then break; fi
  sleep 0.1
done
cargo run --quiet --example self_heal -- --registry "etcd://127.0.0.1:$ETCD_PORT"

echo "== slim facade: no default features (no etcd client, no actix-web / reqwest in the build)"
cargo build --no-default-features
cargo clippy -p steadfast --all-targets --no-default-features -- -D warnings
cargo test --no-default-features -p steadfast
