#!/usr/bin/env bash
# Screenshots of the speed options and the live MFU under Xvfb,
# into docs/images/. Needs: apt-get install xvfb libxcb-cursor0
set -euo pipefail
source "$(dirname "$0")/demo_env.sh"
demo_env ember-demo-speed 94
"$py" -m engine start >/dev/null
"$py" scripts/screenshots_speed.py "$repo/docs/images"
echo "screenshots in docs/images/"
