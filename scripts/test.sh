#!/usr/bin/env bash
# The project's test command (README, CI): installs what the tests need on a
# fresh Debian machine, then runs the format check, clippy with warnings as
# errors, every test of the workspace, and the self-heal demo as a smoke run.
# Installing is fatal on error; after it every stage runs whatever failed
# before, and the script lists every failed stage and exits non-zero at the end.
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

# rnacos 0.8.8 for the Nacos backend tests (the harness starts throwaway
# servers on free loopback ports). Built from crates.io: ~11 min on 2 cores,
# once per machine.
if ! command -v rnacos >/dev/null 2>&1; then
  echo "== installing rnacos 0.8.8 (cargo install, ~11 min cold)"
  cargo install rnacos --version 0.8.8 --locked --quiet
fi

# The foreign Dubbo peer of tests/dubbo_interop.rs: the PyPI apache-dubbo
# Triple server in a venv (~13 s once; the test runs the same idempotent
# script, so this only moves the install ahead of the build).
echo "== Dubbo peer venv (apache-dubbo 3.0.0b1)"
bash tests/dubbo_peer/setup.sh target/dubbo-peer-venv >/dev/null

FAILED=()
# Runs one stage ("$1": its name, then the command); a failure is recorded
# and the next stage runs.
stage() {
  local name=$1
  shift
  echo "== $name"
  if ! "$@"; then
    echo "!! stage failed: $name"
    FAILED+=("$name")
  fi
}

stage "cargo fmt --check" cargo fmt --all -- --check

stage "cargo clippy -D warnings" cargo clippy --workspace --all-targets -- -D warnings
# the awc client factory and AwcCaller are behind a feature
stage "cargo clippy (awc)" cargo clippy -p steadfast-web --all-targets --features awc -- -D warnings

stage "cargo test" cargo test --workspace --all-targets --no-fail-fast
stage "cargo test --doc" cargo test --workspace --doc --no-fail-fast
# the README/docs snippets gated on the metrics and awc features
stage "cargo test --doc (metrics, awc)" cargo test -p steadfast --doc --features metrics,awc --no-fail-fast
stage "cargo test (awc)" cargo test -p steadfast-web --all-targets --features awc --no-fail-fast

stage "demo: cargo run --example self_heal" cargo run --quiet --example self_heal
metrics_end() { cargo run --quiet --example self_heal -- --print-metrics | tail -n 1 | grep -qx '# EOF'; }
stage "demo: self_heal --print-metrics ends with the Prometheus exposition" metrics_end

stage "story: cargo run --example triple_discover (a tonic channel fed by Directory::discover, a provider leaving)" \
  cargo run --quiet --example triple_discover

stage "story: cargo run --example call_through (etcd when on PATH: a SIGKILL and a graceful restart, 0 failed calls)" \
  cargo run --quiet --example call_through

etcd_demo() {
  local dir port peer pid rc=0
  dir=$(mktemp -d /tmp/steadfast-demo-etcd.XXXXXX)
  read -r port peer < <(python3 -c 'import socket
s=[socket.socket() for _ in range(2)]
[x.bind(("127.0.0.1",0)) for x in s]
print(*[x.getsockname()[1] for x in s])')
  etcd --name demo --data-dir "$dir/data" \
    --listen-client-urls "http://127.0.0.1:$port" --advertise-client-urls "http://127.0.0.1:$port" \
    --listen-peer-urls "http://127.0.0.1:$peer" --initial-advertise-peer-urls "http://127.0.0.1:$peer" \
    --initial-cluster "demo=http://127.0.0.1:$peer" \
    --logger=zap --log-outputs=stderr --log-level=warn >"$dir/etcd.log" 2>&1 &
  pid=$!
  for _ in $(seq 1 100); do
    if curl -fsS -m 1 "http://127.0.0.1:$port/health" 2>/dev/null | grep -q '"health":"true"'; then break; fi
    sleep 0.1
  done
  cargo run --quiet --example self_heal -- --registry "etcd://127.0.0.1:$port" || rc=$?
  kill "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  rm -rf "$dir"
  return "$rc"
}
stage "demo against a real etcd" etcd_demo
stage "demo against a throwaway rnacos: self_heal --registry nacos" \
  cargo run --quiet --example self_heal -- --registry nacos

echo "== slim facade: no default features (no etcd client, no actix-web / reqwest in the build)"
stage "slim facade: build" cargo build --no-default-features
stage "slim facade: clippy" cargo clippy -p steadfast --all-targets --no-default-features -- -D warnings
stage "slim facade: test" cargo test --no-default-features -p steadfast

if ((${#FAILED[@]})); then
  echo "== FAILED stages (${#FAILED[@]}):"
  printf '  - %s\n' "${FAILED[@]}"
  exit 1
fi
echo "== all stages passed"
