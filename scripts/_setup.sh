# Sourced by scripts/test and scripts/demo; each calls only the need_* steps it uses:
# the demo needs tmux and politerm, the tests also the dev tools, Chromium, the desktop bus,
# and xterm.js with its fonts.
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

# need_venv [dev]: a virtualenv with politerm (editable); with "dev", its dev tools too.
need_venv() {
    local py="${PYTHON:-python3}"
    if [ ! -x .venv/bin/python ]; then
        "$py" -m venv .venv
    fi
    # dependency groups need pip >= 25.1
    .venv/bin/python -m pip install -q --upgrade "pip>=25.1"
    if [ "${1:-}" = dev ]; then
        .venv/bin/python -m pip install -q -e . --group dev
    else
        .venv/bin/python -m pip install -q -e .
    fi
}

# The fleet tests start their own private redis-server (Debian's package).
need_redis() {
    need_apt redis-server redis-server "install Debian's redis-server"
}

# The web monitor's browser tests drive Debian's chromium through playwright.
need_chromium() {
    need_apt chromium chromium "install Debian's chromium"
}

# Desktop notices go out through the real notify-send; their tests run a private
# dbus-daemon session bus with a notification server on it.
need_desktop_bus() {
    need_apt notify-send libnotify-bin "install libnotify-bin (it ships notify-send)"
    need_apt dbus-daemon dbus-daemon "install dbus-daemon (the session bus)"
}

# The web pages load xterm.js and two fonts: pinned npm packages, fetched from the npm registry
# and verified by politerm itself (no npm needed) into .cache/web, never committed; the
# tarballs stay in .cache/npm, so the wheel build in the tests reuses them offline.
need_webassets() {
    POLI_JS_CACHE="$ROOT/.cache/npm" .venv/bin/python -m politerm.ui.web .cache/web >/dev/null
}

export PATH="$ROOT/.venv/bin:$PATH"
