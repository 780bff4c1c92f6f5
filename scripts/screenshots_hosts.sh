#!/usr/bin/env bash
# Screenshot of the Hosts page under Xvfb, into docs/images/hosts.png: a real OpenSSH server on
# 127.0.0.1 (tests/sshd.py) added as a host, its key trusted and the host probed over SSH.
# Runs from a neutral demo folder so no machine path shows in the picture.
# Needs: apt-get install xvfb libxcb-cursor0 openssh-server
set -euo pipefail
cd "$(dirname "$0")/.."
repo="$(pwd)"
demo=/tmp/ember-demo-hosts
rm -rf "$demo" && mkdir -p "$demo/home"
ln -s "$repo" "$demo/ember-studio"
py="$demo/ember-studio/.venv/bin/python"
export EMBER_HOME="$demo/home" EMBER_SETTINGS_FILE="$demo/settings.ini" DISPLAY=:97
Xvfb :97 -screen 0 1400x900x24 >/dev/null 2>&1 &
xvfb=$!
trap 'kill $xvfb 2>/dev/null; "$py" -m engine stop >/dev/null 2>&1 || true' EXIT
sleep 1
cd "$demo/ember-studio"
"$py" scripts/screenshots_hosts.py "$demo/sshd" "$repo/docs/images"
echo "screenshot in docs/images/hosts.png"
