#!/usr/bin/env bash
# A screenshot of a sweep on Compare under Xvfb,
# into docs/images/. Needs: apt-get install xvfb libxcb-cursor0
set -euo pipefail
source "$(dirname "$0")/demo_env.sh"
demo_env ember-demo-sweep 96
"$py" -m engine start >/dev/null
"$py" scripts/screenshots_sweep.py "$repo/docs/images"
echo "screenshots in docs/images/"
