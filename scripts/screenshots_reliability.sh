#!/usr/bin/env bash
# Screenshots of the Queue panel, the lineage report, Settings' audit log and the custom-code
# confirmation under Xvfb, into docs/images/: a real engine running real jobs.
# Runs from a neutral demo folder so no machine path shows in the picture.
# Needs: apt-get install xvfb libxcb-cursor0
set -euo pipefail
cd "$(dirname "$0")/.."
repo="$(pwd)"
demo=/tmp/ember-demo-reliability
rm -rf "$demo" && mkdir -p "$demo/home"
ln -s "$repo" "$demo/ember-studio"
py="$demo/ember-studio/.venv/bin/python"
export EMBER_HOME="$demo/home" EMBER_SETTINGS_FILE="$demo/settings.ini" DISPLAY=:96
Xvfb :96 -screen 0 1400x900x24 >/dev/null 2>&1 &
xvfb=$!
trap 'kill $xvfb 2>/dev/null; "$py" -m engine stop >/dev/null 2>&1 || true' EXIT
sleep 1
cd "$demo/ember-studio"
"$py" scripts/screenshots_reliability.py "$repo/docs/images" "$demo/my-models"
echo "screenshots in docs/images/"
