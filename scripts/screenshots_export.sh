#!/usr/bin/env bash
# Screenshots of the Export wizard under Xvfb, into docs/images/export-*.png and variants-device.png:
# a MiniLM fine-tune exported to every portable format and deployed in one click to a "Jetson" that is a real
# OpenSSH server on 127.0.0.1 with the test stand-in for trtexec (no Jetson here; see scripts/screenshots_export.py).
# Runs from a neutral demo folder so no machine path shows in the pictures.
# Needs: apt-get install xvfb libxcb-cursor0 openssh-server
set -euo pipefail
cd "$(dirname "$0")/.."
repo="$(pwd)"
demo=/tmp/ember-demo-export
rm -rf "$demo" && mkdir -p "$demo/home"
ln -s "$repo" "$demo/ember-studio"
py="$demo/ember-studio/.venv/bin/python"
export EMBER_HOME="$demo/home" EMBER_SETTINGS_FILE="$demo/settings.ini" DISPLAY=:96 EMBER_SSH_KNOWN_HOSTS=""
Xvfb :96 -screen 0 1400x900x24 >/dev/null 2>&1 &
xvfb=$!
trap 'kill $xvfb 2>/dev/null; "$py" -m engine stop >/dev/null 2>&1 || true' EXIT
sleep 1
cd "$demo/ember-studio"
"$py" scripts/screenshots_export.py "$demo/jetson" "$repo/docs/images"
echo "screenshots in docs/images/export-*.png and variants-device.png"
