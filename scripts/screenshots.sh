#!/usr/bin/env bash
# Screenshots of the real app against a real engine, under Xvfb, into docs/images/.
# Needs: apt-get install xvfb x11-apps imagemagick libxcb-cursor0
# Paths shown in the pictures are neutral: the repo is reached through a link and the
# data dir is a fresh demo folder, so nothing of the machine that took them shows.
set -euo pipefail
cd "$(dirname "$0")/.."
repo="$(pwd)"
demo=/tmp/ember-demo
rm -rf "$demo" && mkdir -p "$demo"
ln -s "$repo" "$demo/ember-studio"
py="$demo/ember-studio/.venv/bin/python"
export EMBER_HOME="$demo/home" DISPLAY=:97
Xvfb :97 -screen 0 1400x900x24 >/dev/null 2>&1 &
xvfb=$!
trap 'kill $xvfb 2>/dev/null; "$py" -m engine stop >/dev/null 2>&1 || true' EXIT
sleep 1
cd "$demo/ember-studio"
"$py" -m engine start >/dev/null
"$py" -m engine.cli jobs start system.probe --quiet >/dev/null
"$py" -m engine.cli jobs start system.probe --name "utilisation sample" --set samples=3 --set interval_s=0.2 --quiet >/dev/null
"$py" -m engine.cli jobs start system.probe --name "CPU and memory sampling" --set samples=3600 --set interval_s=1 --detach >/dev/null
shoot() {  # page file
  "$py" -m app --page "$1" >/dev/null 2>&1 &
  local pid=$!
  sleep "${3:-6}"
  xwd -silent -root | convert xwd:- -crop 1180x760+0+0 +repage "$repo/docs/images/$2"
  kill $pid
  wait $pid 2>/dev/null || true
}
shoot runs main-window.png 8
shoot settings settings.png
shoot new_finetune placeholder.png
id=$("$py" -m engine.cli jobs list --state running | awk '{print $1; exit}')
[ -n "$id" ] && "$py" -m engine.cli cancel "$id" >/dev/null
echo "screenshots in docs/images/"
