#!/usr/bin/env bash
# Screenshots of the parallelism planner and a split run under Xvfb,
# into docs/images/. Needs: apt-get install xvfb libxcb-cursor0
set -euo pipefail
source "$(dirname "$0")/demo_env.sh"
demo_env ember-demo-parallel 95
"$py" -m engine start >/dev/null
"$py" scripts/screenshots_parallel.py "$repo/docs/images"
echo "screenshots in docs/images/"
