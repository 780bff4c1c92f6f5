#!/usr/bin/env bash
# Screenshots of the first-run experience (Welcome, tour, both themes, notifications) under Xvfb,
# into docs/images/. Needs: apt-get install xvfb libxcb-cursor0
set -euo pipefail
cd "$(dirname "$0")/.."
repo="$(pwd)"
demo=/tmp/ember-demo-first-run
rm -rf "$demo" && mkdir -p "$demo"
ln -s "$repo" "$demo/ember-studio"
py="$demo/ember-studio/.venv/bin/python"
# A fresh data dir and settings file: nothing of this machine's user shows, nothing of theirs changes.
export EMBER_HOME="$demo/home" EMBER_SETTINGS_FILE="$demo/settings.ini" DISPLAY=:93
Xvfb :93 -screen 0 1400x900x24 >/dev/null 2>&1 &
xvfb=$!
trap 'kill $xvfb 2>/dev/null; "$py" -m engine stop >/dev/null 2>&1 || true' EXIT
for _ in $(seq 50); do [ -S /tmp/.X11-unix/X93 ] && break; sleep 0.2; done  # Xvfb is up
cd "$demo/ember-studio"
"$py" -m engine start >/dev/null
"$py" scripts/screenshots_first_run.py "$repo/docs/images"
echo "screenshots in docs/images/"
