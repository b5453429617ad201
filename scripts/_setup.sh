# Sourced by scripts/test and scripts/demo: make sure tmux and the virtualenv exist.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

# need_apt COMMAND PACKAGE HINT: install PACKAGE with apt-get unless COMMAND is on PATH.
need_apt() {
    if command -v "$1" >/dev/null 2>&1; then
        return 0
    fi
    echo "$1 not found: installing $2 with apt-get" >&2
    local sudo=""
    if [ "$(id -u)" != 0 ]; then sudo="sudo"; fi
    $sudo apt-get update -qq
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$2" >/dev/null
    command -v "$1" >/dev/null 2>&1 || { echo "$1 is still missing; $3" >&2; exit 1; }
}

need_tmux() {
    need_apt tmux tmux "install tmux >= 3.2"
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

# The web monitor's browser tests drive Debian's chromium through playwright, and its pages
# load xterm.js from the npm registry into .cache/web (never committed).
need_chromium() {
    need_apt chromium chromium "install Debian's chromium"
}

# Desktop notices go out through the real notify-send; their tests run a private
# dbus-daemon session bus with a notification server on it.
need_desktop_bus() {
    need_apt notify-send libnotify-bin "install libnotify-bin (it ships notify-send)"
    need_apt dbus-daemon dbus-daemon "install dbus-daemon (the session bus)"
}

need_xterm() {
    if [ -f .cache/web/node_modules/@xterm/xterm/lib/xterm.js ] \
        && [ -f .cache/web/node_modules/@xterm/addon-fit/lib/addon-fit.js ]; then
        return 0
    fi
    command -v npm >/dev/null 2>&1 || { echo "npm is missing: it installs xterm.js" >&2; exit 1; }
    mkdir -p .cache/web
    npm install --prefix .cache/web --no-audit --no-fund --silent \
        @xterm/xterm@6.0.0 @xterm/addon-fit@0.11.0 >/dev/null
}

need_tmux
need_venv
need_chromium
need_desktop_bus
need_xterm
export PATH="$ROOT/.venv/bin:$PATH"
