# Sourced by scripts/test and scripts/demo: make sure tmux and the virtualenv exist.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

need_tmux() {
    if command -v tmux >/dev/null 2>&1; then
        return 0
    fi
    echo "tmux not found: installing it with apt-get" >&2
    local sudo=""
    if [ "$(id -u)" != 0 ]; then sudo="sudo"; fi
    $sudo apt-get update -qq
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq tmux >/dev/null
    command -v tmux >/dev/null 2>&1 || { echo "tmux is still missing; install tmux >= 3.2" >&2; exit 1; }
}

need_venv() {
    local py="${PYTHON:-python3}"
    if [ ! -x .venv/bin/python ]; then
        "$py" -m venv .venv
    fi
    # dependency groups need pip >= 25.1
    .venv/bin/python -m pip install -q --upgrade "pip>=25.1"
    .venv/bin/python -m pip install -q -e . --group dev
}

need_tmux
need_venv
export PATH="$ROOT/.venv/bin:$PATH"
