#!/usr/bin/env bash
# Screenshots of the speed options and the live MFU under Xvfb,
# into docs/images/. Needs: apt-get install xvfb libxcb-cursor0
set -euo pipefail
cd "$(dirname "$0")/.."
repo="$(pwd)"
demo=/tmp/ember-demo-speed
rm -rf "$demo" && mkdir -p "$demo"
ln -s "$repo" "$demo/ember-studio"
py="$demo/ember-studio/.venv/bin/python"
# A fresh data dir and settings file: nothing of this machine's user shows, nothing of theirs changes.
export EMBER_HOME="$demo/home" EMBER_SETTINGS_FILE="$demo/settings.ini" DISPLAY=:94
Xvfb :94 -screen 0 1400x900x24 >/dev/null 2>&1 &
xvfb=$!
trap 'kill $xvfb 2>/dev/null; "$py" -m engine stop >/dev/null 2>&1 || true' EXIT
for _ in $(seq 50); do [ -S /tmp/.X11-unix/X94 ] && break; sleep 0.2; done  # Xvfb is up
cd "$demo/ember-studio"
"$py" -m engine start >/dev/null
"$py" scripts/screenshots_speed.py "$repo/docs/images"
echo "screenshots in docs/images/"
