#!/usr/bin/env bash
# Screenshots of the real app against a real engine and real runs, under Xvfb, into docs/images/.
# Needs: apt-get install xvfb libxcb-cursor0
# Paths shown in the pictures are neutral: the repo is reached through a link and the
# data dir is a fresh demo folder, so nothing of the machine that took them shows.
set -euo pipefail
cd "$(dirname "$0")/.."
repo="$(pwd)"
demo=/tmp/ember-demo
rm -rf "$demo" && mkdir -p "$demo"
ln -s "$repo" "$demo/ember-studio"
py="$demo/ember-studio/.venv/bin/python"
export EMBER_HOME="$demo/home" EMBER_SETTINGS_FILE="$demo/settings.ini" DISPLAY=:97
Xvfb :97 -screen 0 1400x900x24 >/dev/null 2>&1 &
xvfb=$!
trap 'kill $xvfb 2>/dev/null; "$py" -m engine stop >/dev/null 2>&1 || true' EXIT
sleep 1
cd "$demo/ember-studio"
"$py" -m engine start >/dev/null
"$py" -m engine.cli jobs start system.probe --quiet >/dev/null
"$py" scripts/screenshots.py "$repo/docs/images"
echo "screenshots in docs/images/"
