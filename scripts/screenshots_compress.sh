#!/usr/bin/env bash
# Screenshots of the Compress wizard and the Variants view, under Xvfb, into docs/images/.
# First makes real runs: benchmarks/compress_bench.py --keep (a MiniLM fine-tune and its
# variants, about 15 minutes on two cores), in a neutral demo folder.
# Needs: apt-get install xvfb libxcb-cursor0
set -euo pipefail
cd "$(dirname "$0")/.."
repo="$(pwd)"
demo=/tmp/ember-demo-compress
if [ ! -d "$demo/home/runs" ]; then
  rm -rf "$demo" && mkdir -p "$demo"
  ln -s "$repo" "$demo/ember-studio"
  (cd "$demo/ember-studio" && .venv/bin/python benchmarks/compress_bench.py --keep "$demo/home")
fi
py="$demo/ember-studio/.venv/bin/python"
export EMBER_HOME="$demo/home" EMBER_SETTINGS_FILE="$demo/settings.ini" DISPLAY=:98
Xvfb :98 -screen 0 1400x900x24 >/dev/null 2>&1 &
xvfb=$!
trap 'kill $xvfb 2>/dev/null; "$py" -m engine stop >/dev/null 2>&1 || true' EXIT
sleep 1
cd "$demo/ember-studio"
"$py" scripts/screenshots_compress.py "$repo/docs/images"
echo "screenshots in docs/images/"
