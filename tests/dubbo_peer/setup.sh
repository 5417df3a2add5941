#!/usr/bin/env bash
# Idempotently prepare a Python venv holding apache-dubbo 3.0.0b1 for peer.py.
#
#   usage: tests/dubbo_peer/setup.sh [VENV_DIR]
#   VENV_DIR defaults to target/dubbo-peer-venv under the repository root.
#   The last (and only) line on stdout is the venv's python path (absolute);
#   everything else goes to stderr.
#
# Needs a python >= 3.11 (python3, else python3.13/3.12/3.11; override with
# DUBBO_PEER_PYTHON). If `python -m venv` fails for lack of ensurepip and we
# are root with apt-get, installs pythonX.Y-venv / python3-venv first.
set -euo pipefail

DUBBO_PKG="apache-dubbo"
DUBBO_VERSION="3.0.0b1"

log() { echo "dubbo-peer setup: $*" >&2; }

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
venv="${1:-$repo_root/target/dubbo-peer-venv}"
mkdir -p "$(dirname "$venv")"
venv="$(cd "$(dirname "$venv")" && pwd)/$(basename "$venv")"
vpy="$venv/bin/python"

venv_ok() {
    [ -x "$vpy" ] && "$vpy" - "$DUBBO_PKG" "$DUBBO_VERSION" >/dev/null 2>&1 <<'EOF'
import sys, importlib.metadata as m
assert sys.version_info >= (3, 11)
assert m.version(sys.argv[1]) == sys.argv[2]
import dubbo, h2, uvloop, psutil  # noqa: F401  (compiled deps load)
EOF
}

if venv_ok; then
    echo "$vpy"
    exit 0
fi

py_ok() { "$1" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' >/dev/null 2>&1; }

pick_python() {
    local c
    for c in ${DUBBO_PEER_PYTHON:-} python3 python3.13 python3.12 python3.11; do
        if command -v "$c" >/dev/null 2>&1 && py_ok "$c"; then
            command -v "$c"
            return 0
        fi
    done
    return 1
}

install_venv_support() {
    local py="$1" ver
    ver="$("$py" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')"
    if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
        log "python -m venv failed and cannot apt-get install python${ver}-venv (need root + apt-get)"
        return 1
    fi
    log "installing python${ver}-venv via apt-get"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >&2
    apt-get install -y -qq --no-install-recommends "python${ver}-venv" >&2 \
        || apt-get install -y -qq --no-install-recommends python3-venv >&2
}

make_venv() {
    local py="$1"
    # Only ever --clear a directory that already is a venv.
    if [ -f "$venv/pyvenv.cfg" ]; then
        "$py" -m venv --clear "$venv" >&2
    else
        "$py" -m venv "$venv" >&2
    fi
}

# Reuse an existing venv whose python works and is new enough; else (re)create.
if ! { [ -x "$vpy" ] && py_ok "$vpy" && "$vpy" -m pip --version >/dev/null 2>&1; }; then
    if [ -e "$venv" ] && [ ! -f "$venv/pyvenv.cfg" ] && [ -n "$(ls -A "$venv" 2>/dev/null)" ]; then
        log "$venv exists, is not empty and is not a venv; refusing to touch it"
        exit 1
    fi
    py="$(pick_python)" || { log "no python >= 3.11 found (set DUBBO_PEER_PYTHON)"; exit 1; }
    log "creating venv $venv with $py"
    if ! make_venv "$py"; then
        if "$py" -c 'import ensurepip' >/dev/null 2>&1; then
            log "python -m venv failed"
            exit 1
        fi
        install_venv_support "$py"
        make_venv "$py"
    fi
fi

log "installing ${DUBBO_PKG}==${DUBBO_VERSION}"
"$vpy" -m pip install -q --disable-pip-version-check "${DUBBO_PKG}==${DUBBO_VERSION}" >&2

if ! venv_ok; then
    log "venv $venv still lacks a working ${DUBBO_PKG} ${DUBBO_VERSION}"
    exit 1
fi
echo "$vpy"
