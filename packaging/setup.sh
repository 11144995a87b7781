#!/usr/bin/env bash
# Set up Torch Workbench on a fresh Debian/Ubuntu machine: Qt's system libraries, a virtual environment in
# .venv, and the package with its test tools. Safe to run again. Usage: bash packaging/setup.sh
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
VENV=${VENV:-.venv}

# Qt's xcb platform and QtWebEngine need these (the offscreen platform needs none of them).
QT_LIBS="libxcb-cursor0 libxcb-icccm4 libxcb-image0 libxcb-keysyms1 libxcb-randr0 libxcb-render-util0
libxcb-shape0 libxcb-xinerama0 libxkbcommon-x11-0 libnss3 libxcomposite1 libxdamage1 libxrandr2 libxtst6
libxkbfile1 libegl1 libgl1 libfontconfig1 libdbus-1-3"
# Headless machines (CI) also get a virtual screen for real-window tests and screenshots.
HEADLESS_TOOLS="xvfb xauth imagemagick"  # imagemagick: `import` screenshots the X screen (Graph tab test)

as_root() {
    if [ "$(id -u)" = 0 ]; then "$@"; elif command -v sudo >/dev/null; then sudo "$@"; else
        echo "setup: need root (or sudo) to install system packages: $*" >&2; return 1; fi
}

if command -v apt-get >/dev/null; then
    wanted="$QT_LIBS"
    # Ubuntu 24.04 renamed libasound2 to libasound2t64; take whichever this release has.
    if apt-cache show libasound2t64 >/dev/null 2>&1; then wanted="$wanted libasound2t64"; else wanted="$wanted libasound2"; fi
    if [ -n "${CI:-}" ] || [ -z "${DISPLAY:-}${WAYLAND_DISPLAY:-}" ]; then wanted="$wanted $HEADLESS_TOOLS"; fi
    # Python's venv module is a separate package on Debian.
    "$PYTHON" -c "import ensurepip" 2>/dev/null || wanted="$wanted python3-venv"
    missing=$(dpkg-query -W -f='${Package} ${Status}\n' $wanted 2>/dev/null | awk '$4 != "installed" {print $1}' || true)
    for pkg in $wanted; do dpkg-query -W "$pkg" >/dev/null 2>&1 || missing="$missing $pkg"; done
    missing=$(echo $missing | tr ' ' '\n' | sort -u | tr '\n' ' ')
    if [ -n "${missing// /}" ]; then
        echo "setup: installing system packages: $missing"
        as_root apt-get update -qq
        DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq --no-install-recommends $missing >/dev/null
    fi
else
    echo "setup: not a Debian/Ubuntu system; install Qt 6's xcb libraries with your package manager" >&2
fi

"$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 10))' || { echo "setup: Python 3.10 or newer is needed" >&2; exit 1; }
[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
"$VENV/bin/python" -m pip install -q --upgrade pip
"$VENV/bin/python" -m pip install -q -e '.[dev,lightning,tensorboard,hf,timm]'
echo "setup: done. Start the app with: $VENV/bin/workbench"
